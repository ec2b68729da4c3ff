#include <kiln/serialize/detail/hdf5_reader.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include <kiln/core/error.hpp>

// The format is HDF5's "File Format Specification" (version 3.0, for libhdf5 1.10); the section names in
// the comments below are that document's.
namespace kiln::detail::hdf5 {

namespace {

constexpr std::uint64_t kUndefined = std::numeric_limits<std::uint64_t>::max();
constexpr char kSignature[] = "\x89HDF\r\n\x1a\n";
// Bounds that no Keras file comes near; they keep a crafted file from making the reader walk forever.
constexpr int kMaxDepth = 64;                   // B-tree levels, nested datatypes
constexpr std::size_t kMaxHeaderBlocks = 1024;  // continuation blocks of one object header
constexpr std::size_t kMaxMessages = 1u << 16;  // messages of one object header
constexpr std::size_t kMaxGroupMembers = 1u << 20;
constexpr int kMaxRank = 32;  // HDF5's own limit

}  // namespace

// ---- the file and a bounded cursor over it --------------------------------------------------------------

struct Datatype {
  enum Class { fixed_point = 0, floating_point = 1, string = 3, opaque = 5, variable_length = 9 } type_class = fixed_point;
  std::uint32_t size = 0;  // bytes of one element
  bool big_endian = false;
  bool is_signed = false;
  bool variable_string = false;  // a variable-length string (class 9, type 1)
};

struct Dataspace {
  bool null = false;  // no elements at all
  std::vector<std::uint64_t> dims;
  std::uint64_t elements() const;
};

struct Attribute {
  std::string name;
  Datatype type;
  Dataspace space;
  std::string_view data;  // points into the file
  std::uint64_t data_offset = 0;
};

struct ObjectHeader {
  // A group with a symbol table ("old style"), or compact links in the header ("new style").
  bool symbol_table = false;
  std::uint64_t btree = kUndefined, local_heap = kUndefined;
  bool link_info = false;
  std::vector<std::pair<std::string, std::uint64_t>> links;
  // A dataset.
  bool has_type = false, has_space = false, has_layout = false;
  Datatype type;
  Dataspace space;
  bool compact = false;
  std::uint64_t data_address = kUndefined, data_size = 0;
  std::string_view compact_data;
  std::string refused;  // the first unsupported feature a dataset or group relies on, for its message
  std::vector<Attribute> attributes;
};

struct FileState {
  std::shared_ptr<const ByteSource> data;  // the file's bytes, in memory or read as needed
  std::uint64_t size = 0;
  std::string source;
  std::uint64_t base = 0;  // addresses are relative to it
  int offset_size = 8, length_size = 8;
  std::uint64_t root_address = kUndefined;
  std::mutex mutex;  // guards the caches
  std::map<std::uint64_t, std::unique_ptr<ObjectHeader>> headers;
  std::map<std::uint64_t, std::map<std::uint16_t, std::string_view>> global_heaps;

  [[noreturn]] void fail(const std::string& what, std::uint64_t at = kUndefined) const {
    std::string where = source + ": not a readable HDF5 file: " + what;
    if (at != kUndefined) where += " (at byte " + std::to_string(at) + ")";
    throw SerializationError(where);
  }
  // The absolute position of `address`, checked to leave room for `size` bytes.
  std::uint64_t locate(std::uint64_t address, std::uint64_t size, const char* what) const {
    if (address == kUndefined) fail(std::string(what) + " has an undefined address");
    const std::uint64_t total = this->size;
    if (address > total || base > total - address) fail(std::string(what) + " lies outside the file", address);
    const std::uint64_t position = base + address;
    if (size > total - position)
      fail(std::string(what) + " of " + std::to_string(size) + " bytes runs past the end of the file", position);
    return position;
  }
  const ObjectHeader& header(std::uint64_t address, const std::string& path);
  std::string_view global_object(std::uint64_t collection, std::uint32_t index);

  // `count` bytes at `position`, which the caller checked lie in the file, valid while the file lives. In
  // memory they are the source's own; read from a file, they come a block at a time (metadata sits in
  // small structures), or as one piece when they straddle blocks, and stay for later views.
  std::string_view view(std::uint64_t position, std::uint64_t count) const {
    if (count == 0) return {};
    if (const char* bytes = data->bytes()) return {bytes + position, static_cast<std::size_t>(count)};
    std::lock_guard<std::mutex> lock(view_mutex);
    const std::uint64_t block = position / kBlock;
    if ((position + count - 1) / kBlock == block) {
      std::string& cached = blocks[block];
      if (cached.empty()) {
        cached.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kBlock, size - block * kBlock)));
        data->read(block * kBlock, cached.data(), cached.size());
      }
      return {cached.data() + (position - block * kBlock), static_cast<std::size_t>(count)};
    }
    std::string& piece = pieces[{position, count}];
    if (piece.empty()) {
      piece.resize(static_cast<std::size_t>(count));
      data->read(position, piece.data(), piece.size());
    }
    return piece;
  }
  static constexpr std::uint64_t kBlock = 1 << 16;
  mutable std::mutex view_mutex;  // guards the views' cache
  mutable std::map<std::uint64_t, std::string> blocks;
  mutable std::map<std::pair<std::uint64_t, std::uint64_t>, std::string> pieces;
};

namespace {

// All ones in `size` bytes: HDF5's undefined address, whatever the size of addresses.
bool undefined_address(std::uint64_t value, int size) {
  return size >= 8 ? value == kUndefined : value == (std::uint64_t{1} << (8 * size)) - 1;
}

class Cursor {
 public:
  Cursor(const FileState& file, std::uint64_t position, std::uint64_t end)
      : file_(file), position_(position), end_(end) {}
  std::uint64_t position() const { return position_; }
  std::uint64_t remaining() const { return end_ - position_; }

  std::uint64_t unsigned_int(int size) {
    need(static_cast<std::uint64_t>(size));
    std::uint64_t value = 0;
    const std::string_view bytes = file_.view(position_, static_cast<std::uint64_t>(size));
    for (int i = 0; i < size; ++i) value |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    position_ += static_cast<std::uint64_t>(size);
    return value;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(unsigned_int(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(unsigned_int(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(unsigned_int(4)); }
  std::uint64_t u64() { return unsigned_int(8); }
  // An address ("size of offsets" bytes); all ones is the undefined address.
  std::uint64_t address() {
    const int size = file_.offset_size;
    const std::uint64_t value = unsigned_int(size);
    return undefined_address(value, size) ? kUndefined : value;
  }
  std::uint64_t length() { return unsigned_int(file_.length_size); }
  std::string_view bytes(std::uint64_t size) {
    need(size);
    const std::string_view view = file_.view(position_, size);
    position_ += size;
    return view;
  }
  void skip(std::uint64_t size) {
    need(size);
    position_ += size;
  }
  void expect_signature(const char* signature, const char* what) {
    if (bytes(4) != std::string_view(signature, 4))
      file_.fail(std::string(what) + " lacks its signature", position_ - 4);
  }
  [[noreturn]] void fail(const std::string& what) const { file_.fail(what, position_); }

 private:
  void need(std::uint64_t size) const {
    if (size > end_ - position_) file_.fail("a structure runs past its end", position_);
  }
  const FileState& file_;
  std::uint64_t position_, end_;
};

// Jenkins's lookup3 hashlittle(), which HDF5 uses for the checksums of version 2 structures.
std::uint32_t lookup3(std::string_view data) {
  auto rot = [](std::uint32_t x, int k) { return (x << k) | (x >> (32 - k)); };
  std::uint32_t a, b, c;
  a = b = c = 0xdeadbeef + static_cast<std::uint32_t>(data.size());
  const auto* k = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t length = data.size();
  auto word = [&](std::size_t i) {
    return static_cast<std::uint32_t>(k[i]) | static_cast<std::uint32_t>(k[i + 1]) << 8 |
           static_cast<std::uint32_t>(k[i + 2]) << 16 | static_cast<std::uint32_t>(k[i + 3]) << 24;
  };
  while (length > 12) {
    a += word(0), b += word(4), c += word(8);
    a -= c, a ^= rot(c, 4), c += b;
    b -= a, b ^= rot(a, 6), a += c;
    c -= b, c ^= rot(b, 8), b += a;
    a -= c, a ^= rot(c, 16), c += b;
    b -= a, b ^= rot(a, 19), a += c;
    c -= b, c ^= rot(b, 4), b += a;
    length -= 12, k += 12;
  }
  if (length == 0) return c;
  unsigned char tail[12] = {};
  std::memcpy(tail, k, length);
  k = tail;
  a += word(0), b += word(4), c += word(8);
  c ^= b, c -= rot(b, 14);
  a ^= c, a -= rot(c, 11);
  b ^= a, b -= rot(a, 25);
  c ^= b, c -= rot(b, 16);
  a ^= c, a -= rot(c, 4);
  b ^= a, b -= rot(a, 14);
  c ^= b, c -= rot(b, 24);
  return c;
}

void check_checksum(const FileState& file, std::uint64_t start, std::uint64_t end, const char* what) {
  const std::string_view covered = file.view(start, end - start);
  Cursor stored(file, end, end + 4);
  if (lookup3(covered) != stored.u32()) file.fail(std::string(what) + " fails its checksum", start);
}

// ---- messages (section IV.A.2 of the specification) ------------------------------------------------------

Datatype parse_datatype(const FileState& file, Cursor& cursor, int depth) {
  if (depth > kMaxDepth) cursor.fail("datatypes nest too deeply");
  const std::uint8_t class_and_version = cursor.u8();
  const std::uint32_t bits = static_cast<std::uint32_t>(cursor.unsigned_int(3));
  Datatype type;
  type.size = cursor.u32();
  switch (class_and_version & 0x0f) {
    case 0: {  // fixed-point: bit offset, precision
      type.type_class = Datatype::fixed_point;
      type.big_endian = bits & 1;
      type.is_signed = bits & 8;
      const std::uint16_t offset = cursor.u16(), precision = cursor.u16();
      if ((type.size != 1 && type.size != 2 && type.size != 4 && type.size != 8) || offset != 0 ||
          precision != 8 * type.size)
        cursor.fail("an integer type of " + std::to_string(type.size) + " bytes and " + std::to_string(precision) +
                    " bits is not supported");
      return type;
    }
    case 1: {  // floating-point: the IEEE layouts only
      type.type_class = Datatype::floating_point;
      type.big_endian = bits & 1;
      if (bits & 0x40) cursor.fail("VAX floating point is not supported");
      const std::uint16_t offset = cursor.u16(), precision = cursor.u16();
      const std::uint8_t exponent_at = cursor.u8(), exponent_bits = cursor.u8();
      const std::uint8_t mantissa_at = cursor.u8(), mantissa_bits = cursor.u8();
      const std::uint32_t bias = cursor.u32();
      const bool ieee = offset == 0 && mantissa_at == 0 &&
                        ((type.size == 2 && precision == 16 && exponent_at == 10 && exponent_bits == 5 &&
                          mantissa_bits == 10 && bias == 15) ||
                         (type.size == 4 && precision == 32 && exponent_at == 23 && exponent_bits == 8 &&
                          mantissa_bits == 23 && bias == 127) ||
                         (type.size == 8 && precision == 64 && exponent_at == 52 && exponent_bits == 11 &&
                          mantissa_bits == 52 && bias == 1023));
      if (!ieee) cursor.fail("a floating-point type that is not IEEE half, single or double precision");
      return type;
    }
    case 3:  // fixed-length string
      type.type_class = Datatype::string;
      if (type.size == 0) cursor.fail("a string type of 0 bytes");
      return type;
    case 5: {  // opaque: h5py's for numpy's void dtypes, so Keras's bfloat16 weights (2 bytes; see is_bfloat16)
      type.type_class = Datatype::opaque;
      if (type.size == 0) cursor.fail("an opaque type of 0 bytes");
      const std::uint64_t tag = bits & 0xff;  // the tag's length, NUL-padded to a multiple of 8
      for (std::uint64_t i = 0; i < tag; ++i) cursor.u8();
      return type;
    }
    case 9: {  // variable-length: a string, or a sequence of one-byte characters
      type.type_class = Datatype::variable_length;
      const Datatype base = parse_datatype(file, cursor, depth + 1);
      const bool string = (bits & 0x0f) == 1;
      const bool characters = (bits & 0x0f) == 0 && base.size == 1 &&
                              (base.type_class == Datatype::fixed_point || base.type_class == Datatype::string);
      if (!string && !characters) cursor.fail("a variable-length sequence of anything but characters");
      type.variable_string = true;
      return type;
    }
    default:
      cursor.fail("datatype class " + std::to_string(class_and_version & 0x0f) +
                  " (compound, enumerated, array, reference, ...) is not supported");
  }
}

Dataspace parse_dataspace(Cursor& cursor, int length_size) {
  Dataspace space;
  const std::uint8_t version = cursor.u8();
  const std::uint8_t rank = cursor.u8();
  cursor.u8();  // flags: whether maximum dimensions follow the dimensions; nothing here needs them
  if (version == 1) {
    cursor.skip(5);
  } else if (version == 2) {
    const std::uint8_t type = cursor.u8();
    if (type > 2) cursor.fail("dataspace type " + std::to_string(type));
    space.null = type == 2;
  } else {
    cursor.fail("dataspace version " + std::to_string(version));
  }
  if (rank > kMaxRank) cursor.fail("a dataspace of rank " + std::to_string(rank));
  for (int i = 0; i < rank; ++i) space.dims.push_back(cursor.unsigned_int(length_size));
  return space;
}

void parse_attribute(const FileState& file, Cursor& cursor, ObjectHeader& header) {
  Attribute attribute;
  const std::uint8_t version = cursor.u8();
  if (version < 1 || version > 3) cursor.fail("attribute message version " + std::to_string(version));
  const std::uint8_t flags = cursor.u8();
  if (flags & 3) cursor.fail("attributes with shared datatypes or dataspaces are not supported");
  const std::uint16_t name_size = cursor.u16(), type_size = cursor.u16(), space_size = cursor.u16();
  if (version == 3) cursor.u8();  // the name's character set
  auto padded = [&](std::uint64_t size) { return version == 1 ? (size + 7) / 8 * 8 : size; };
  const std::string_view name = cursor.bytes(padded(name_size)).substr(0, name_size);
  attribute.name = std::string(name.substr(0, std::min(name.find('\0'), name.size())));
  {
    const std::uint64_t start = cursor.position();
    Cursor type_cursor(file, start, start + type_size);
    cursor.skip(padded(type_size));
    attribute.type = parse_datatype(file, type_cursor, 0);
  }
  {
    const std::uint64_t start = cursor.position();
    Cursor space_cursor(file, start, start + space_size);
    cursor.skip(padded(space_size));
    attribute.space = parse_dataspace(space_cursor, file.length_size);
  }
  attribute.data_offset = cursor.position();
  attribute.data = cursor.bytes(cursor.remaining());
  header.attributes.push_back(std::move(attribute));
}

void parse_layout(Cursor& cursor, ObjectHeader& header, int offset_size, int length_size) {
  const std::uint8_t version = cursor.u8();
  if (version == 1 || version == 2) {
    const std::uint8_t rank = cursor.u8(), layout_class = cursor.u8();
    cursor.skip(5);
    if (layout_class == 2) {
      header.refused = "chunked storage";
      return;
    }
    if (layout_class != 0) header.data_address = cursor.unsigned_int(offset_size);
    cursor.skip(4 * static_cast<std::uint64_t>(rank));
    if (layout_class == 0) {
      header.compact = true;
      header.compact_data = cursor.bytes(cursor.u32());
    }
    header.data_size = kUndefined;  // implied by the dataspace and the datatype
  } else if (version == 3) {
    const std::uint8_t layout_class = cursor.u8();
    if (layout_class == 0) {
      header.compact = true;
      header.compact_data = cursor.bytes(cursor.u16());
      header.data_size = header.compact_data.size();
    } else if (layout_class == 1) {
      header.data_address = cursor.unsigned_int(offset_size);
      header.data_size = cursor.unsigned_int(length_size);
    } else {
      header.refused = layout_class == 2 ? "chunked storage" : "virtual storage";
      return;
    }
  } else {
    header.refused = "data layout version " + std::to_string(version);
    return;
  }
  if (!header.compact && undefined_address(header.data_address, offset_size)) header.data_address = kUndefined;
  header.has_layout = true;
}

void parse_link(Cursor& cursor, ObjectHeader& header, int offset_size) {
  if (cursor.u8() != 1) cursor.fail("link message version");
  const std::uint8_t flags = cursor.u8();
  std::uint8_t type = 0;
  if (flags & 0x08) type = cursor.u8();
  if (flags & 0x04) cursor.skip(8);  // creation order
  if (flags & 0x10) cursor.u8();     // character set
  const std::uint64_t name_length = cursor.unsigned_int(1 << (flags & 3));
  const std::string name(cursor.bytes(name_length));
  if (type != 0) {
    header.refused = "soft or external link '" + name + "'";
    return;
  }
  std::uint64_t address = cursor.unsigned_int(offset_size);
  if (undefined_address(address, offset_size)) address = kUndefined;
  header.links.emplace_back(name, address);
}

void parse_message(const FileState& file, std::uint16_t type, std::uint8_t flags, Cursor cursor, ObjectHeader& header) {
  const bool shared = flags & 0x02;
  switch (type) {
    case 0x0001:
      if (shared) cursor.fail("a shared dataspace");
      header.space = parse_dataspace(cursor, file.length_size);
      header.has_space = true;
      break;
    case 0x0002: {  // link info: compact links stay in the header, dense ones go to a fractal heap
      cursor.u8();
      const std::uint8_t info_flags = cursor.u8();
      if (info_flags & 1) cursor.skip(8);
      header.link_info = true;
      if (cursor.address() != kUndefined) header.refused = "dense link storage (a fractal heap)";
      break;
    }
    case 0x0003:
      if (shared) cursor.fail("a shared (committed) datatype");
      header.type = parse_datatype(file, cursor, 0);
      header.has_type = true;
      break;
    case 0x0006:
      parse_link(cursor, header, file.offset_size);
      break;
    case 0x0008:
      parse_layout(cursor, header, file.offset_size, file.length_size);
      break;
    case 0x000B:
      header.refused = "filtered (compressed) storage";
      break;
    case 0x000C:
      if (shared) cursor.fail("a shared attribute");
      parse_attribute(file, cursor, header);
      break;
    case 0x0011:
      header.symbol_table = true;
      header.btree = cursor.address();
      header.local_heap = cursor.address();
      break;
    case 0x0015: {  // attribute info: dense attribute storage lives in a fractal heap
      cursor.u8();
      const std::uint8_t info_flags = cursor.u8();
      if (info_flags & 1) cursor.skip(2);
      if (cursor.address() != kUndefined) header.refused = "dense attribute storage (a fractal heap)";
      break;
    }
    default:  // fill values, times, comments, group info, B-tree 'K' values: nothing a reader of values needs
      if (flags & 0x08) cursor.fail("header message type " + std::to_string(type) + " must be understood");
      break;
  }
}

struct Block {
  std::uint64_t position, length;
};

// Version 1 object header (section IV.A.1.a): messages of 8-byte aligned sizes; continuation blocks hold
// more of them.
void parse_header_v1(FileState& file, std::uint64_t position, ObjectHeader& header) {
  Cursor prefix(file, position, file.locate(position - file.base, 16, "an object header") + 16);
  prefix.u8();  // version, checked by the caller
  prefix.skip(1);
  prefix.u16();  // the number of messages: counted as they come instead
  prefix.u32();  // reference count
  const std::uint32_t size = prefix.u32();
  std::vector<Block> blocks{{position + 16, size}};
  std::set<std::uint64_t> seen{position};
  std::size_t messages = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    if (b >= kMaxHeaderBlocks) file.fail("an object header with too many continuation blocks", position);
    const Block block = blocks[b];
    file.locate(block.position - file.base, block.length, "an object header block");
    Cursor cursor(file, block.position, block.position + block.length);
    while (cursor.remaining() >= 8) {
      if (++messages > kMaxMessages) file.fail("an object header with too many messages", position);
      const std::uint16_t type = cursor.u16(), data_size = cursor.u16();
      const std::uint8_t flags = cursor.u8();
      cursor.skip(3);
      const std::uint64_t start = cursor.position();
      cursor.skip(data_size);
      if (type == 0x0010) {  // continuation
        Cursor next(file, start, start + data_size);
        const std::uint64_t address = next.address(), length = next.length();
        const std::uint64_t at = file.locate(address, length, "an object header continuation");
        if (!seen.insert(at).second) file.fail("object header continuation blocks form a cycle", at);
        blocks.push_back({at, length});
        continue;
      }
      parse_message(file, type, flags, Cursor(file, start, start + data_size), header);
    }
  }
}

// Version 2 object header (section IV.A.1.b): "OHDR", flags, optional times and attribute limits, the
// first chunk's size, messages, a checksum; continuation blocks start "OCHK".
void parse_header_v2(FileState& file, std::uint64_t position, ObjectHeader& header) {
  Cursor cursor(file, position, file.size);
  cursor.expect_signature("OHDR", "an object header");
  if (cursor.u8() != 2) cursor.fail("object header version");
  const std::uint8_t flags = cursor.u8();
  if (flags & 0x20) cursor.skip(16);
  if (flags & 0x10) cursor.skip(4);
  const std::uint64_t chunk = cursor.unsigned_int(1 << (flags & 3));
  const bool creation_order = flags & 0x04;
  // Each block: where its checksum starts, and its messages.
  struct V2Block {
    std::uint64_t start, messages, length;
  };
  std::vector<V2Block> blocks{{position, cursor.position(), chunk}};
  std::set<std::uint64_t> seen{position};
  std::size_t messages = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    if (b >= kMaxHeaderBlocks) file.fail("an object header with too many continuation blocks", position);
    const V2Block block = blocks[b];
    if (block.length > file.size || block.messages > file.size - block.length - 4)
      file.fail("an object header block runs past the end of the file", block.messages);
    check_checksum(file, block.start, block.messages + block.length, "an object header");
    if (b > 0) Cursor(file, block.start, block.messages).expect_signature("OCHK", "an object header continuation");
    Cursor messages_cursor(file, block.messages, block.messages + block.length);
    const std::uint64_t header_size = creation_order ? 6 : 4;
    while (messages_cursor.remaining() >= header_size) {
      if (++messages > kMaxMessages) file.fail("an object header with too many messages", position);
      const std::uint8_t type = messages_cursor.u8();
      const std::uint16_t data_size = messages_cursor.u16();
      const std::uint8_t message_flags = messages_cursor.u8();
      if (creation_order) messages_cursor.u16();
      const std::uint64_t data_start = messages_cursor.position();
      messages_cursor.skip(data_size);
      if (type == 0x10) {
        Cursor next(file, data_start, data_start + data_size);
        const std::uint64_t address = next.address(), length = next.length();
        const std::uint64_t at = file.locate(address, length, "an object header continuation");
        if (length < 8) file.fail("an object header continuation block too small", at);
        if (!seen.insert(at).second) file.fail("object header continuation blocks form a cycle", at);
        blocks.push_back({at, at + 4, length - 8});
        continue;
      }
      parse_message(file, type, message_flags, Cursor(file, data_start, data_start + data_size), header);
    }
  }
}

}  // namespace

std::uint64_t Dataspace::elements() const {
  if (null) return 0;
  std::uint64_t count = 1;
  for (const std::uint64_t dim : dims) {
    if (dim != 0 && count > std::numeric_limits<std::uint64_t>::max() / dim) return kUndefined;
    count *= dim;
  }
  return count;
}

const ObjectHeader& FileState::header(std::uint64_t address, const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex);
  auto found = headers.find(address);
  if (found != headers.end()) return *found->second;
  const std::uint64_t position = locate(address, 4, "an object header");
  auto parsed = std::make_unique<ObjectHeader>();
  try {
    const std::string_view start = view(position, 4);
    if (start == "OHDR") {
      parse_header_v2(*this, position, *parsed);
    } else if (start[0] == 1) {
      parse_header_v1(*this, position, *parsed);
    } else {
      fail("object header version " + std::to_string(static_cast<unsigned char>(start[0])), position);
    }
  } catch (const SerializationError& error) {
    throw SerializationError(std::string(error.what()) + " in the object '" + path + "'");
  }
  return *headers.emplace(address, std::move(parsed)).first->second;
}

// A global heap collection ("GCOL", section III.E) holds the bytes of variable-length strings.
std::string_view FileState::global_object(std::uint64_t collection, std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mutex);
  auto found = global_heaps.find(collection);
  if (found == global_heaps.end()) {
    const std::uint64_t position = locate(collection, 16, "a global heap");
    Cursor head(*this, position, position + 16);
    head.expect_signature("GCOL", "a global heap");
    if (head.u8() != 1) head.fail("global heap version");
    head.skip(3);
    const std::uint64_t size = head.length();
    if (size < 16) head.fail("a global heap smaller than its header");
    locate(collection, size, "a global heap");
    Cursor cursor(*this, position + 16, position + size);
    std::map<std::uint16_t, std::string_view> objects;
    while (cursor.remaining() >= 8 + static_cast<std::uint64_t>(length_size)) {
      const std::uint16_t object = cursor.u16();
      cursor.skip(6);
      const std::uint64_t object_size = cursor.length();
      if (object == 0) break;  // the free space: the rest of the collection
      objects[object] = cursor.bytes(object_size);
      cursor.skip(std::min<std::uint64_t>((8 - object_size % 8) % 8, cursor.remaining()));
    }
    found = global_heaps.emplace(collection, std::move(objects)).first;
  }
  auto object = found->second.find(static_cast<std::uint16_t>(index));
  if (index > 0xffff || object == found->second.end())
    fail("a variable-length string refers to heap object " + std::to_string(index) + " that does not exist",
         collection);
  return object->second;
}

// ---- File ---------------------------------------------------------------------------------------------------

bool looks_like_hdf5(std::string_view bytes) { return bytes.substr(0, 8) == std::string_view(kSignature, 8); }

File::File(std::string bytes, std::string source) : File(memory_source(std::move(bytes)), std::move(source)) {}

File::File(std::shared_ptr<const ByteSource> data, std::string source) : state_(std::make_shared<FileState>()) {
  FileState& file = *state_;
  file.data = std::move(data);
  file.size = file.data->size();
  file.source = std::move(source);
  // The superblock sits at 0, 512, 1024, 2048, ... (after a user block).
  std::uint64_t at = 0;
  while (at + 8 <= file.size && file.view(at, 8) != std::string_view(kSignature, 8)) at = at == 0 ? 512 : at * 2;
  if (at + 8 > file.size) file.fail("no HDF5 signature");
  Cursor cursor(file, at + 8, file.size);
  const std::uint8_t version = cursor.u8();
  if (version <= 1) {
    cursor.skip(4);  // free-space, root group and shared-header versions, reserved
    file.offset_size = cursor.u8();
    file.length_size = cursor.u8();
    cursor.skip(1);
    cursor.skip(4 + 4);  // group K values, consistency flags
    if (version == 1) cursor.skip(4);
  } else if (version <= 3) {
    file.offset_size = cursor.u8();
    file.length_size = cursor.u8();
    cursor.u8();  // consistency flags
  } else {
    file.fail("superblock version " + std::to_string(version));
  }
  auto valid_size = [](int size) { return size == 2 || size == 4 || size == 8; };
  if (!valid_size(file.offset_size) || !valid_size(file.length_size))
    file.fail("offsets of " + std::to_string(file.offset_size) + " bytes and lengths of " +
              std::to_string(file.length_size));
  const std::uint64_t base = cursor.address();
  if (base == kUndefined || base > file.size) file.fail("a base address outside the file");
  file.base = base;
  if (version <= 1) {
    cursor.address();  // free-space info
    cursor.address();  // end of file
    cursor.address();  // driver info
    cursor.address();  // the root's symbol table entry: its link name offset, then its object header
    file.root_address = cursor.address();
  } else {
    cursor.address();  // superblock extension
    cursor.address();  // end of file
    file.root_address = cursor.address();
    check_checksum(file, at, cursor.position(), "the superblock");
  }
}

Object File::root() const { return Object(state_, state_->root_address, "/"); }

// ---- Object ---------------------------------------------------------------------------------------------------

Object::Object(std::shared_ptr<FileState> file, std::uint64_t address, std::string path)
    : file_(std::move(file)), address_(address), path_(std::move(path)) {}

const ObjectHeader& Object::header() const { return file_->header(address_, path_); }

bool Object::is_group() const {
  const ObjectHeader& h = header();
  return h.symbol_table || h.link_info || !h.links.empty();
}

bool Object::is_dataset() const {
  const ObjectHeader& h = header();
  return h.has_type && h.has_space;
}

namespace {

// The members of an old-style group: walks its v1 B-tree (section III.A.1) to the symbol table nodes
// ("SNOD", III.B) and reads each name from the local heap ("HEAP", III.D).
class SymbolTableWalk {
 public:
  SymbolTableWalk(const FileState& file, std::uint64_t heap, std::vector<std::pair<std::string, std::uint64_t>>& out)
      : file_(file), out_(out) {
    const std::uint64_t position = file.locate(heap, 8 + 2 * 8 + 8, "a local heap");
    Cursor cursor(file, position, file.size);
    cursor.expect_signature("HEAP", "a local heap");
    if (cursor.u8() != 0) cursor.fail("local heap version");
    cursor.skip(3);
    const std::uint64_t size = cursor.length();
    cursor.length();  // free list
    const std::uint64_t data = cursor.address();
    heap_ = file.view(file.locate(data, size, "a local heap's data"), size);
  }

  void node(std::uint64_t address, int depth) {
    if (depth > kMaxDepth) file_.fail("a group B-tree deeper than " + std::to_string(kMaxDepth));
    const std::uint64_t position = file_.locate(address, 8, "a group B-tree node");
    if (!visited_.insert(position).second) file_.fail("a group B-tree that refers to itself", position);
    Cursor cursor(file_, position, file_.size);
    cursor.expect_signature("TREE", "a group B-tree node");
    if (cursor.u8() != 0) cursor.fail("a B-tree node that is not a group's");
    const std::uint8_t level = cursor.u8();
    const std::uint16_t entries = cursor.u16();
    cursor.address();  // left sibling
    cursor.address();  // right sibling
    cursor.length();   // key 0
    for (int i = 0; i < entries; ++i) {
      const std::uint64_t child = cursor.address();
      cursor.length();  // key i + 1
      if (level > 0) {
        node(child, depth + 1);
      } else {
        symbols(child);
      }
    }
  }

 private:
  void symbols(std::uint64_t address) {
    const std::uint64_t position = file_.locate(address, 8, "a symbol table node");
    if (!visited_.insert(position).second) file_.fail("a symbol table node listed twice", position);
    Cursor cursor(file_, position, file_.size);
    cursor.expect_signature("SNOD", "a symbol table node");
    if (cursor.u8() != 1) cursor.fail("symbol table node version");
    cursor.skip(1);
    const std::uint16_t count = cursor.u16();
    for (int i = 0; i < count; ++i) {
      const std::uint64_t name_offset = cursor.length();
      const std::uint64_t header = cursor.address();
      cursor.skip(4 + 4 + 16);  // cache type, reserved, scratch pad
      if (name_offset >= heap_.size()) cursor.fail("a member name outside its local heap");
      const std::string_view rest = heap_.substr(static_cast<std::size_t>(name_offset));
      const std::size_t end = rest.find('\0');
      if (end == std::string_view::npos) cursor.fail("a member name without its terminating NUL");
      if (out_.size() >= kMaxGroupMembers) cursor.fail("a group with too many members");
      out_.emplace_back(std::string(rest.substr(0, end)), header);
    }
  }

  const FileState& file_;
  std::vector<std::pair<std::string, std::uint64_t>>& out_;
  std::string_view heap_;
  std::set<std::uint64_t> visited_;
};

std::vector<std::pair<std::string, std::uint64_t>> members_of(const FileState& file, const ObjectHeader& h,
                                                              const std::string& path) {
  if (!h.refused.empty()) file.fail("the group '" + path + "' uses " + h.refused + ", which kiln does not read");
  std::vector<std::pair<std::string, std::uint64_t>> members = h.links;
  if (h.symbol_table) {
    SymbolTableWalk walk(file, h.local_heap, members);
    walk.node(h.btree, 0);
  }
  std::sort(members.begin(), members.end());
  for (std::size_t i = 1; i < members.size(); ++i)
    if (members[i].first == members[i - 1].first)
      file.fail("the group '" + path + "' has two members named '" + members[i].first + "'");
  return members;
}

std::string join(const std::string& path, const std::string& name) {
  return path == "/" ? "/" + name : path + "/" + name;
}

}  // namespace

std::vector<std::string> Object::member_names() const {
  if (!is_group()) file_->fail("'" + path_ + "' is not a group");
  std::vector<std::string> names;
  for (auto& [name, address] : members_of(*file_, header(), path_)) names.push_back(name);
  return names;
}

std::optional<Object> Object::find(const std::string& name) const {
  if (!is_group()) return std::nullopt;
  for (auto& [member, address] : members_of(*file_, header(), path_))
    if (member == name) return Object(file_, address, join(path_, name));
  return std::nullopt;
}

std::optional<Object> Object::find_path(const std::string& relative) const {
  std::optional<Object> current = *this;
  std::size_t start = 0;
  while (current && start <= relative.size()) {
    const std::size_t slash = std::min(relative.find('/', start), relative.size());
    const std::string part = relative.substr(start, slash - start);
    if (!part.empty()) current = current->find(part);
    start = slash + 1;
  }
  return current;
}

Object Object::at(const std::string& relative) const {
  std::optional<Object> found = find_path(relative);
  if (!found) file_->fail("no object '" + join(path_, relative) + "'");
  return *found;
}

std::vector<std::string> Object::attribute_names() const {
  std::vector<std::string> names;
  for (const Attribute& attribute : header().attributes) names.push_back(attribute.name);
  return names;
}

bool Object::has_attribute(const std::string& name) const {
  for (const Attribute& attribute : header().attributes)
    if (attribute.name == name) return true;
  return false;
}

namespace {

const Attribute& find_attribute(const FileState& file, const ObjectHeader& h, const std::string& path,
                                const std::string& name) {
  for (const Attribute& attribute : h.attributes)
    if (attribute.name == name) return attribute;
  file.fail("the object '" + path + "' has no attribute '" + name + "'");
}

// The number of elements of `space` with `element_size` bytes each, checked to fit in `available` bytes. An
// element counts as one byte at least, so no count runs past the bytes there are.
std::uint64_t checked_elements(const FileState& file, const Dataspace& space, std::uint64_t element_size,
                               std::uint64_t available, const std::string& what) {
  const std::uint64_t count = space.elements();
  if (count == kUndefined || count > available / std::max<std::uint64_t>(element_size, 1))
    file.fail(what + " declares more data than it holds");
  return count;
}

template <class T>
T load(const unsigned char* p, bool big_endian) {
  unsigned char bytes[sizeof(T)];
  for (std::size_t i = 0; i < sizeof(T); ++i) bytes[i] = p[big_endian ? sizeof(T) - 1 - i : i];
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

double half_to_double(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

double number_at(const Datatype& type, const unsigned char* p) {
  const bool be = type.big_endian;
  if (type.type_class == Datatype::opaque) {  // Keras's bfloat16 (the callers checked it is one): float32's high half
    const std::uint32_t bits = std::uint32_t{load<std::uint16_t>(p, false)} << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  if (type.type_class == Datatype::floating_point) {
    if (type.size == 2) return half_to_double(load<std::uint16_t>(p, be));
    if (type.size == 4) return load<float>(p, be);
    return load<double>(p, be);
  }
  switch (type.size) {
    case 1:
      return type.is_signed ? static_cast<double>(static_cast<std::int8_t>(p[0])) : p[0];
    case 2:
      return type.is_signed ? load<std::int16_t>(p, be) : load<std::uint16_t>(p, be);
    case 4:
      return type.is_signed ? load<std::int32_t>(p, be) : load<std::uint32_t>(p, be);
    default:
      return type.is_signed ? static_cast<double>(load<std::int64_t>(p, be))
                            : static_cast<double>(load<std::uint64_t>(p, be));
  }
}

bool numeric(const Datatype& type) {
  return type.type_class == Datatype::fixed_point || type.type_class == Datatype::floating_point;
}

// Where a dataset's elements are: in its header (compact) or at a position of the file, checked to hold every
// element.
struct DataLocation {
  std::uint64_t count = 0;     // elements
  std::string_view compact;    // the bytes, for compact storage
  std::uint64_t position = 0;  // in the file, for contiguous storage
};

DataLocation locate_data(const FileState& file, const ObjectHeader& h, const std::string& path) {
  if (!h.refused.empty()) file.fail("the dataset '" + path + "' uses " + h.refused + ", which kiln does not read");
  if (!h.has_layout) file.fail("the dataset '" + path + "' has no data layout");
  // (an opaque dataset is read only as Keras's bfloat16, which Object checks first)
  if (!numeric(h.type) && h.type.type_class != Datatype::opaque)
    file.fail("the dataset '" + path + "' is not numeric");
  const std::uint64_t declared = h.data_size == kUndefined ? file.size : h.data_size;
  DataLocation location;
  location.count = checked_elements(file, h.space, h.type.size, declared, "the dataset '" + path + "'");
  const std::uint64_t size = location.count * h.type.size;
  if (h.compact) {
    if (size > h.compact_data.size()) file.fail("the dataset '" + path + "' declares more data than it holds");
    location.compact = h.compact_data.substr(0, static_cast<std::size_t>(size));
  } else if (size > 0) {
    location.position = file.locate(h.data_address, size, ("the data of '" + path + "'").c_str());
  }
  return location;
}

// Hands the dataset's elements to `consume(bytes, first, count)` a chunk at a time: a dataset of any size is
// read through a buffer of a megabyte.
template <class Consume>
void for_each_chunk(const FileState& file, const ObjectHeader& h, const DataLocation& location, Consume&& consume) {
  const std::uint64_t item = h.type.size;
  if (!location.compact.empty() || location.count == 0) {
    consume(reinterpret_cast<const unsigned char*>(location.compact.data()), 0, location.count);
    return;
  }
  if (const char* bytes = file.data->bytes()) {
    consume(reinterpret_cast<const unsigned char*>(bytes + location.position), 0, location.count);
    return;
  }
  const std::uint64_t per_chunk = std::max<std::uint64_t>(1, (std::uint64_t{1} << 20) / item);
  std::vector<unsigned char> chunk(static_cast<std::size_t>(std::min(location.count, per_chunk) * item));
  for (std::uint64_t first = 0; first < location.count; first += per_chunk) {
    const std::uint64_t n = std::min(per_chunk, location.count - first);
    file.data->read(location.position + first * item, chunk.data(), static_cast<std::size_t>(n * item));
    consume(chunk.data(), first, n);
  }
}

}  // namespace

std::vector<std::string> Object::attribute_strings(const std::string& name) const {
  const Attribute& attribute = find_attribute(*file_, header(), path_, name);
  const std::string what = "the attribute '" + name + "' of '" + path_ + "'";
  std::vector<std::string> strings;
  if (attribute.type.type_class == Datatype::string) {
    const std::uint64_t size = attribute.type.size;
    const std::uint64_t count = checked_elements(*file_, attribute.space, size, attribute.data.size(), what);
    for (std::uint64_t i = 0; i < count; ++i) {
      std::string_view text = attribute.data.substr(static_cast<std::size_t>(i * size), static_cast<std::size_t>(size));
      text = text.substr(0, std::min(text.find('\0'), text.size()));
      while (!text.empty() && text.back() == ' ') text.remove_suffix(1);  // space-padded strings
      strings.emplace_back(text);
    }
    return strings;
  }
  if (attribute.space.elements() == 0) return strings;  // h5py writes an empty list as an empty float array
  if (attribute.type.type_class != Datatype::variable_length) file_->fail(what + " is not a string");
  // Each element: its length (4 bytes), then a global heap ID (collection address, object index).
  const std::uint64_t element = 4 + static_cast<std::uint64_t>(file_->offset_size) + 4;
  const std::uint64_t count = checked_elements(*file_, attribute.space, element, attribute.data.size(), what);
  Cursor cursor(*file_, attribute.data_offset, attribute.data_offset + count * element);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint32_t length = cursor.u32();
    const std::uint64_t collection = cursor.address();
    const std::uint32_t index = cursor.u32();
    if (length == 0 && (collection == kUndefined || collection == 0)) {
      strings.emplace_back();
      continue;
    }
    const std::string_view object = file_->global_object(collection, index);
    if (length > object.size()) file_->fail(what + " is longer than its heap object");
    std::string_view text = object.substr(0, length);
    strings.emplace_back(text.substr(0, std::min(text.find('\0'), text.size())));
  }
  return strings;
}

std::vector<double> Object::attribute_numbers(const std::string& name) const {
  const Attribute& attribute = find_attribute(*file_, header(), path_, name);
  const std::string what = "the attribute '" + name + "' of '" + path_ + "'";
  if (!numeric(attribute.type)) file_->fail(what + " is not numeric");
  const std::uint64_t count =
      checked_elements(*file_, attribute.space, attribute.type.size, attribute.data.size(), what);
  std::vector<double> values;
  const auto* data = reinterpret_cast<const unsigned char*>(attribute.data.data());
  for (std::uint64_t i = 0; i < count; ++i) values.push_back(number_at(attribute.type, data + i * attribute.type.size));
  return values;
}

Shape Object::dataset_shape() const {
  const ObjectHeader& h = header();
  if (!is_dataset()) file_->fail("'" + path_ + "' is not a dataset");
  std::vector<std::int64_t> dims;
  for (const std::uint64_t dim : h.space.dims) {
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      file_->fail("the dataset '" + path_ + "' has a dimension too large");
    dims.push_back(static_cast<std::int64_t>(dim));
  }
  return Shape(dims);
}

bool Object::dataset_is_float() const {
  if (!is_dataset()) file_->fail("'" + path_ + "' is not a dataset");
  return header().type.type_class == Datatype::floating_point || dataset_is_bfloat16();
}

bool Object::dataset_is_bfloat16() const {
  if (!is_dataset()) file_->fail("'" + path_ + "' is not a dataset");
  const Datatype& type = header().type;
  if (type.type_class != Datatype::opaque) return false;
  // Keras's H5IOStore writes a bfloat16 array (h5py: two-byte opaque) with the attribute dtype="bfloat16".
  if (type.size != 2 || !has_attribute("dtype"))
    file_->fail("the dataset '" + path_ + "' is opaque (" + std::to_string(type.size) +
                " bytes) without Keras's dtype=\"bfloat16\" attribute");
  const std::vector<std::string> dtype = attribute_strings("dtype");
  if (dtype.size() != 1 || dtype[0] != "bfloat16")
    file_->fail("the dataset '" + path_ + "' is opaque with dtype attribute '" + (dtype.empty() ? "" : dtype[0]) +
                "', not Keras's \"bfloat16\"");
  return true;
}

Array Object::read(DType dtype) const {
  const Shape shape = dataset_shape();
  if (header().type.type_class == Datatype::opaque) dataset_is_bfloat16();  // refuses any other opaque data
  locate_data(*file_, header(), path_);  // the file holds every element before any is allocated
  Array array(shape, dtype);
  read_into(array);
  return array;
}

void Object::read_into(Array& into) const {
  const Shape shape = dataset_shape();
  if (into.shape() != shape)
    file_->fail("the dataset '" + path_ + "' has shape " + shape.to_string() + ", not " + into.shape().to_string());
  const ObjectHeader& h = header();
  if (h.type.type_class == Datatype::opaque) dataset_is_bfloat16();  // refuses any other opaque data
  const bool int8_data = h.type.type_class == Datatype::fixed_point && h.type.size == 1 && h.type.is_signed;
  if (into.dtype() == DType::int8 && !int8_data)  // quantized weights are Keras's int8 as stored, never converted
    file_->fail("the dataset '" + path_ + "' is not int8, as the quantized weight it is read into is");
  const DataLocation location = locate_data(*file_, h, path_);
  const bool native = (into.dtype() == DType::int8) ||
                      (h.type.type_class == Datatype::floating_point && !h.type.big_endian &&
                       ((into.dtype() == DType::float32 && h.type.size == 4) ||
                        (into.dtype() == DType::float64 && h.type.size == 8)));
  // The bytes as they are, straight into the array's storage, when they are its dtype.
  if (native && location.compact.empty() && location.count > 0 && file_->data->bytes() == nullptr) {
    file_->data->read(location.position, into.raw(), static_cast<std::size_t>(location.count * h.type.size));
    return;
  }
  for_each_chunk(*file_, h, location, [&](const unsigned char* data, std::uint64_t first, std::uint64_t count) {
    if (native) {
      std::memcpy(static_cast<char*>(into.raw()) + first * h.type.size, data, static_cast<std::size_t>(count * h.type.size));
      return;
    }
    for (std::uint64_t i = 0; i < count; ++i)
      into.set_flat(static_cast<std::size_t>(first + i), number_at(h.type, data + i * h.type.size));
  });
}

void Object::check_data() const {
  if (is_dataset() && header().type.type_class == Datatype::opaque) dataset_is_bfloat16();
  if (!is_dataset()) file_->fail("'" + path_ + "' is not a dataset");
  const ObjectHeader& h = header();
  for_each_chunk(*file_, h, locate_data(*file_, h, path_), [](const unsigned char*, std::uint64_t, std::uint64_t) {});
}

std::vector<double> Object::read_numbers() const {
  const ObjectHeader& h = header();
  if (!is_dataset()) file_->fail("'" + path_ + "' is not a dataset");
  if (h.type.type_class == Datatype::opaque) dataset_is_bfloat16();
  std::vector<double> values;
  for_each_chunk(*file_, h, locate_data(*file_, h, path_), [&](const unsigned char* data, std::uint64_t, std::uint64_t count) {
    for (std::uint64_t i = 0; i < count; ++i) values.push_back(number_at(h.type, data + i * h.type.size));
  });
  return values;
}

}  // namespace kiln::detail::hdf5
