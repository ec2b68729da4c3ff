#pragma once
// Data helpers for training on real files: read a numeric CSV, cut a time series into windows with
// next-step targets, split rows into train/validation/test, and scale features with statistics fitted on
// the training part only (statistics from validation or test rows would leak what the model is judged on).
//
// Axis 0 is always the sample (or time) axis. Every helper takes float32 or float64 arrays and returns the
// dtype it was given; statistics are computed in double either way.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/dtype.hpp>

namespace kiln {

// ---- CSV -----------------------------------------------------------------------------------------------

/// Whether the first line of a CSV file names its columns.
enum class CsvHeader {
  absent,   ///< every line is data; columns are named "column_0", "column_1", ...
  present,  ///< the first line names the columns
  /// The first line is a header when none of its fields is a number and data when all of them are; a
  /// mixed first line is an error asking for `absent` or `present`, because guessing there would either
  /// drop a data row or read a header as numbers.
  detect,
};

/// How read_csv reads a file. The defaults read every column of a comma-separated file as float32, with a
/// header if the first line looks like one.
struct CsvOptions {
  /// Whether the first line is a header (default detect).
  CsvHeader header = CsvHeader::detect;
  /// Between fields (default ','); not a quote or a line break (ConfigError). Fields may be quoted as in
  /// RFC 4180, and spaces and tabs around a field are dropped unless the delimiter is one of them.
  char delimiter = ',';
  /// Columns to read, by header name or by index into the file's columns (0 is the file's first column; a
  /// negative index counts from the end, -1 the last column, here and in label_indices and text_indices).
  /// Give at most one of the two; both empty reads every column. Columns not chosen may hold text.
  std::vector<std::string> column_names;
  /// Columns to read by index (see column_names). Chosen columns come out in the order given; one given
  /// twice is read twice.
  std::vector<std::int64_t> column_indices;
  /// The file's first column is an index (a row number or a date): it is never read, may hold text, is
  /// ignored when detecting a header, and cannot be chosen.
  bool skip_index_column = false;
  /// The dtype of the values: float32 (default) or float64. A number beyond float32's range is a ValueError
  /// that suggests float64.
  DType dtype = DType::float32;
  /// By default "nan", "inf" and empty fields are errors, since one of them in a training set turns every
  /// loss into NaN far from its cause. When allowed, "nan"/"inf" read as such and an empty field as NaN.
  bool allow_non_finite = false;
  /// Lines to skip at the start of the file, before the header (pandas's skiprows as a count): a title or a
  /// note some exporters write. Blank lines among them count. Negative: ConfigError.
  std::int64_t skip_rows = 0;
  /// Lines whose first non-blank character is this one are comments, skipped wherever they are ('#' for
  /// most data files); '\0' (the default): none. Not the delimiter, a quote or a line break (ConfigError).
  char comment = '\0';
  /// The label column(s), by header name or by index (at most one of the two), read into CsvTable::labels
  /// and left out of the values: read_csv("iris.csv", {.label_names = {"species"}}) gives the features and
  /// the labels apart. Without column_names/column_indices the values are every other column.
  std::vector<std::string> label_names;
  /// The label column(s) by index into the file's columns (see label_names).
  std::vector<std::int64_t> label_indices;
  /// Columns of text (a class name, a category), by header name or by index (at most one of the two): read
  /// as strings into CsvTable::text, not as numbers, and left out of the values. Encode them with
  /// kiln::StringLookup.
  std::vector<std::string> text_names;
  /// Text columns by index into the file's columns (see text_names).
  std::vector<std::int64_t> text_indices;
};

/// What read_csv returns: the chosen columns' values and their names.
struct CsvTable {
  Array values;                           ///< (rows, chosen columns), in the file's row order
  std::vector<std::string> column_names;  ///< one per column of `values`
  Array labels;                           ///< (rows, label columns) when labels were asked for, else empty
  std::vector<std::string> label_names;   ///< one per column of `labels`
  /// The text columns asked for (CsvOptions::text_names), each a column of strings in row order.
  std::vector<std::vector<std::string>> text;
  std::vector<std::string> text_names;  ///< one per column of `text`
};

/// Throws ValueError for a file that cannot be read or holds bad data (missing, empty, ragged rows, text
/// where a number belongs): the message names the file and line, the column by name and index, and quotes
/// the text, e.g.  data.csv:17: column 'FTSE' (index 4): "12,x" is not a number.
/// Throws ConfigError for options that do not fit the file (an unknown column name, with the nearest
/// names; an index out of range; names asked of a file without a header).
CsvTable read_csv(const std::string& path, const CsvOptions& options = {});

namespace detail {
/// read_csv's values without the column names, which a headerless file of a million columns would have to
/// make as a million strings (kiln predict reads a whole sample per line).
Array read_csv_values(const std::string& path, const CsvOptions& options = {});
}  // namespace detail

// ---- labels --------------------------------------------------------------------------------------------

/// Keras's keras.utils.to_categorical: integer class ids (any shape; a last axis of 1 is dropped, as Keras
/// drops it) to one-hot rows, shape + (num_classes,). num_classes -1: the largest id + 1. ValueError for an
/// id that is negative, not an integer, or not below num_classes.
Array to_categorical(const Array& labels, std::int64_t num_classes = -1, DType dtype = DType::float32);

/// NumPy's argmax: the position of the largest value along `axis` (negative from the end; -1, the last, is a
/// classifier's class axis), so argmax(model.predict(x)) is each row's predicted class. The first position wins
/// a tie, and a NaN counts as the largest, as in NumPy. The result has the input's shape without `axis` and
/// its dtype (positions are exact: below 2^24 in float32). ShapeError for an axis the array does not have or
/// of size 0.
Array argmax(const Array& values, int axis = -1);

/// scikit-learn's confusion_matrix (and tf.math.confusion_matrix): counts[i][j] is how many samples of class i
/// were predicted as class j, rows the true classes, columns the predicted ones, so the diagonal counts the
/// right answers. `labels` and `predictions` each hold one class per sample: class ids, (samples,) or
/// (samples, 1), or rows of scores (samples, classes) such as predict()'s probabilities or one-hot labels,
/// whose argmax is the class. num_classes -1: the largest class seen + 1. Returns (num_classes, num_classes)
/// counts, float64. ValueError for sample counts that differ, or a class id that is negative, not an integer,
/// or not below num_classes.
Array confusion_matrix(const Array& labels, const Array& predictions, std::int64_t num_classes = -1);

// ---- windows over a time series ------------------------------------------------------------------------

/// How many windows of `window` steps, starting every `stride` steps, fit in `time_steps` (0 if none).
std::int64_t num_windows(std::int64_t time_steps, std::int64_t window, std::int64_t stride = 1);

/// (time, features...) -> (num_windows, window, features...); window k holds rows [k*stride, k*stride+window).
/// This copies: consecutive windows overlap, so a contiguous (num_windows, window, ...) array cannot share
/// the series' storage. With stride 1 it holds `window` times the series.
Array sliding_windows(const Array& series, std::int64_t window, std::int64_t stride = 1);

/// The row `horizon` steps after the last row of each window of sliding_windows(series, window, stride)
/// that has one: (num_windows(time - horizon, window, stride), features...). These are the first windows
/// of sliding_windows; windows_with_targets below pairs them for you.
Array window_targets(const Array& series, std::int64_t window, std::int64_t horizon = 1, std::int64_t stride = 1);

/// What windows_with_targets returns: the input windows and, at the same index, each one's target row.
struct WindowedSeries {
  Array inputs;   ///< (num_windows, window, input features...)
  Array targets;  ///< (num_windows, target features...): the target row `horizon` steps after each window
};

/// Windows of `inputs` paired with next-step rows of `targets`, both indexed by the same time axis (they
/// may be different series, e.g. returns in, absolute returns out). Windows without a target are left out.
/// Throws ShapeError when the two series differ in length, ValueError when no window has a target.
WindowedSeries windows_with_targets(const Array& inputs, const Array& targets, std::int64_t window,
                                    std::int64_t horizon = 1, std::int64_t stride = 1);

// ---- splits --------------------------------------------------------------------------------------------

/// Splits rows in order (no shuffling, so a time series keeps its past before its future): fractions
/// {0.7, 0.15, 0.15} give train, validation and test. Fractions must be positive and sum to 1; boundaries
/// are rounded cumulative fractions, so every row lands in exactly one part. Throws ValueError on bad
/// fractions or a part that would be empty. The parts share the source's storage and keep it alive
/// (Array::rows): no copy, and writing into a part writes into the source.
std::vector<Array> split_rows(const Array& source, const std::vector<double>& fractions);

/// A uniformly random order of 0..num_rows-1 (Fisher-Yates over Rng::below, so it is identical with every
/// standard library). The same seed gives the same order.
std::vector<std::int64_t> shuffled_row_order(std::int64_t num_rows, std::uint64_t seed);

/// The given rows of `source`, gathered into a new array (rows may repeat).
Array take_rows(const Array& source, const std::vector<std::int64_t>& rows);

/// scikit-learn's train_test_split: each array's training rows, then its test rows, {x_train, x_test,
/// y_train, y_test} for {x, y}. ceil(test_size · rows) rows test, drawn with `seed`; with `stratify` (one
/// label per row, such as the class ids), each class gives the test part its share of them, within one row
/// (a class of a few rows may land wholly in one part). Copies. ValueError for test_size outside (0, 1), arrays of
/// different row counts, or a split that leaves no training row; ShapeError for a stratify that is not (rows,) or
/// (rows, 1).
std::vector<Array> train_test_split(const std::vector<Array>& arrays, double test_size = 0.25, std::uint64_t seed = 0,
                                    const Array& stratify = Array());

/// split_rows after a seeded shuffle. The parts are copies, since shuffled rows are not contiguous.
/// Inputs and targets split with the same seed (and the same number of rows) stay paired.
std::vector<Array> shuffled_split_rows(const Array& source, const std::vector<double>& fractions, std::uint64_t seed);

/// Keras's keras.utils.pad_sequences: how token sequences of different lengths become one batch.
struct PadOptions {
  std::int64_t maxlen = -1;        ///< the batch's length; -1: its longest sequence's
  std::string padding = "pre";     ///< "pre" (Keras's default: the padding before each sequence) or "post"
  std::string truncating = "pre";  ///< a longer sequence loses its first ("pre") or last ("post") tokens
  double value = 0.0;              ///< the padding's token: 0 is what Embedding(mask_zero) masks
  DType dtype = DType::float32;    ///< the batch's dtype
  /// With maxlen -1, the longest length rounded up to a multiple of this: batches of a model whose length is
  /// unknown then come in a few lengths, each planned once (a Program keeps 16 plans). 1: no rounding.
  std::int64_t pad_to_multiple_of = 1;
};
/// The sequences as rows of a (count, maxlen) array, padded and truncated as `options` say. ValueError for
/// an unknown padding or truncating, a negative maxlen other than -1, or pad_to_multiple_of below 1.
Array pad_sequences(const std::vector<std::vector<std::int64_t>>& sequences, const PadOptions& options = {});
/// 1 where `padded` (as pad_sequences made it) holds a token, 0 where it holds `value`: the mask
/// Embedding(mask_zero) computes, for layers that take a mask argument.
Array padding_mask(const Array& padded, double value = 0.0);

// ---- scaling -------------------------------------------------------------------------------------------

/// (x - mean) / standard_deviation per feature (the last axis), with statistics over every other axis, so
/// (samples, features) and windows (samples, window, features) both work; 1-D input is a ShapeError.
class Standardizer {
 public:
  Standardizer() = default;
  /// Restores a fitted state (e.g. loaded from a file); throws ValueError if the sizes differ or a
  /// standard deviation is not positive.
  Standardizer(std::vector<double> mean, std::vector<double> standard_deviation);

  /// Fit on the training part only. The standard deviation is the population one (divides by n, like
  /// scikit-learn's StandardScaler). A constant feature's is set to 1, so that feature becomes 0 instead
  /// of NaN, and its centering still applies.
  Standardizer& fit(const Array& train);
  /// `data` standardized with the fitted statistics, as a new array of its dtype. ValueError before fit;
  /// ShapeError for 1-D data or another number of features than fit saw.
  Array transform(const Array& data) const;
  /// Undoes transform: back to the data's units, e.g. for a model's scaled predictions. Errors as transform's.
  Array inverse_transform(const Array& data) const;

  /// Whether fit ran or a fitted state was given.
  bool fitted() const { return !mean_.empty(); }
  /// Each feature's mean over the training data; empty until fitted.
  const std::vector<double>& mean() const { return mean_; }
  /// Each feature's population standard deviation (1 for a constant feature); empty until fitted.
  const std::vector<double>& standard_deviation() const { return standard_deviation_; }

 private:
  std::vector<double> mean_;
  std::vector<double> standard_deviation_;
};

/// Maps each feature's training range [data_min, data_max] linearly onto [low, high] ([-1, 1] by default,
/// the range of a tanh output). Values outside the training range map outside [low, high]: they are not
/// clipped, so that inverse_transform restores them.
class MinMaxScaler {
 public:
  /// An unfitted scaler onto [low, high]; ValueError unless low < high, both finite.
  explicit MinMaxScaler(double low = -1.0, double high = 1.0);
  /// Restores a fitted state; throws ValueError if the sizes differ or a data_max is below its data_min.
  MinMaxScaler(std::vector<double> data_min, std::vector<double> data_max, double low = -1.0, double high = 1.0);

  /// A constant feature (data_max == data_min) maps to `low` rather than dividing by zero.
  MinMaxScaler& fit(const Array& train);
  /// Each feature mapped from its training range onto [low, high], as a new array of data's dtype.
  /// ValueError before fit; ShapeError for 1-D data or another number of features than fit saw.
  Array transform(const Array& data) const;
  /// Undoes transform: back to the data's units, e.g. for a model's scaled predictions. Errors as transform's.
  Array inverse_transform(const Array& data) const;

  /// Whether fit ran or a fitted state was given.
  bool fitted() const { return !data_min_.empty(); }
  /// The lower end of the target range.
  double low() const { return low_; }
  /// The upper end of the target range.
  double high() const { return high_; }
  /// Each feature's minimum over the training data; empty until fitted.
  const std::vector<double>& data_min() const { return data_min_; }
  /// Each feature's maximum over the training data; empty until fitted.
  const std::vector<double>& data_max() const { return data_max_; }

 private:
  double low_;
  double high_;
  std::vector<double> data_min_;
  std::vector<double> data_max_;
};

// ---- returns -------------------------------------------------------------------------------------------

/// log(p[t] / p[t-1]) along axis 0: (time, features...) -> (time - 1, features...). Throws ValueError
/// naming the row and column of a price that is not positive and finite.
Array log_returns(const Array& prices);

}  // namespace kiln
