// libFuzzer target that measures libhdf5 itself, not kiln: Debian's libhdf5 (1.10) opening hostile files
// from memory, visiting every object and reading every attribute and dataset, as a loader built on it would.
// It is why kiln reads HDF5 with its own reader (kiln/serialize/detail/hdf5_reader.hpp) and gives libhdf5
// only what kiln itself writes: docs/keras.md quotes what this found.
//
//   FUZZ_TARGET=hdf5-library FUZZ_SECONDS=300 make fuzz
//
// The library is not instrumented (Debian's binary), so coverage guidance reaches only this file and ASan
// sees only the library's calls into intercepted functions (memcpy, malloc); what it reports is what a
// user's process would suffer: crashes, hangs (-timeout) and runaway allocations (-rss_limit_mb). Leaks on
// the library's error paths are not counted (detect_leaks=0 in scripts/fuzz.sh for this target).
#include <hdf5.h>

#include <cstdint>
#include <vector>

namespace {

constexpr hsize_t kMaxElements = 1u << 20;  // reads of more are skipped, as a loader would refuse them

void read_attribute(hid_t attribute) {
  const hid_t type = H5Aget_type(attribute);
  const hid_t space = H5Aget_space(attribute);
  if (type >= 0 && space >= 0) {
    const hssize_t count = H5Sget_simple_extent_npoints(space);
    const hid_t memory = H5Tget_native_type(type, H5T_DIR_ASCEND);
    const std::size_t size = memory >= 0 ? H5Tget_size(memory) : 0;
    if (count >= 0 && static_cast<hsize_t>(count) <= kMaxElements && size > 0 && size <= 4096) {
      std::vector<unsigned char> buffer(static_cast<std::size_t>(count) * size + 1);
      if (H5Aread(attribute, memory, buffer.data()) >= 0 && H5Tis_variable_str(memory) > 0)
        H5Dvlen_reclaim(memory, space, H5P_DEFAULT, buffer.data());
    }
    if (memory >= 0) H5Tclose(memory);
  }
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
}

herr_t visit_attribute(hid_t object, const char* name, const H5A_info_t*, void*) {
  const hid_t attribute = H5Aopen(object, name, H5P_DEFAULT);
  if (attribute >= 0) {
    read_attribute(attribute);
    H5Aclose(attribute);
  }
  return 0;
}

void read_dataset(hid_t dataset) {
  const hid_t space = H5Dget_space(dataset);
  if (space < 0) return;
  const hssize_t count = H5Sget_simple_extent_npoints(space);
  if (count >= 0 && static_cast<hsize_t>(count) <= kMaxElements) {
    std::vector<double> values(static_cast<std::size_t>(count) + 1);
    H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  H5Sclose(space);
}

herr_t visit_object(hid_t file, const char* name, const H5O_info_t* info, void*) {
  const hid_t object = H5Oopen(file, name, H5P_DEFAULT);
  if (object < 0) return 0;
  H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, visit_attribute, nullptr);
  if (info->type == H5O_TYPE_DATASET) read_dataset(object);
  H5Oclose(object);
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(access, 1 << 16, /*backing_store=*/0);
  H5Pset_file_image(access, const_cast<std::uint8_t*>(data), size);
  const hid_t file = H5Fopen("fuzz.h5", H5F_ACC_RDONLY, access);
  if (file >= 0) {
    H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_NATIVE, visit_object, nullptr, H5O_INFO_BASIC);
    H5Fclose(file);
  }
  H5Pclose(access);
  return 0;
}
