#include <kiln/optim/schedules.hpp>

#include <algorithm>
#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>

namespace kiln {

namespace {

constexpr double pi = 3.14159265358979323846;

[[noreturn]] void invalid(const std::string& who, const std::string& message) {
  throw ConfigError(who + ": " + message);
}

// Step boundaries are counts: written back as integers when they are whole, as Keras users write them.
Config number_list(const std::vector<double>& values, bool whole_as_integers) {
  Config list = Config::list();
  for (double value : values) {
    const bool whole = whole_as_integers && value == std::floor(value) && std::abs(value) < 9.0e15;
    list.push_back(whole ? Config(static_cast<std::int64_t>(value)) : Config(value));
  }
  return list;
}

std::vector<double> numbers(const Config& list, const std::string& what) {
  std::vector<double> result;
  for (const Config& item : list.as_list(what)) result.push_back(item.as_double(what));
  return result;
}

}  // namespace

// ---- LearningRateSchedule ----------------------------------------------------------------------------

Registry<ScheduleClass>& schedule_registry() {
  static Registry<ScheduleClass> registry("learning-rate schedule");
  return registry;
}

Config LearningRateSchedule::serialize() const {
  const std::string key =
      schedule_registry().key_where([this](const ScheduleClass& entry) { return entry.type == typeid(*this); });
  if (key.empty())
    throw ConfigError(class_name_ + " is not registered; register it with KILN_REGISTER_SCHEDULE to save it by config");
  return Config{{"module", "keras.optimizers.schedules"},
                {"class_name", class_name_},
                {"config", get_config()},
                {"registered_name", key.rfind("kiln>", 0) == 0 ? Config() : Config(key)}};
}

SchedulePtr LearningRateSchedule::from_config(const Config& serialized) {
  if (!serialized.is_map())
    throw ConfigError("a learning-rate schedule is {\"class_name\": ..., \"config\": {...}}, got " +
                      serialized.to_string());
  std::string name = serialized.get_string("class_name");
  if (const Config* registered = serialized.find("registered_name"); registered != nullptr && !registered->is_null())
    name = registered->as_string("key 'registered_name'");
  const Config* arguments = serialized.find("config");
  return schedule_registry().get(name).create(arguments != nullptr ? *arguments : Config::map());
}

// ---- ExponentialDecay -----------------------------------------------------------------------------------

ExponentialDecay::ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate,
                                   bool staircase, std::string name)
    : LearningRateSchedule("ExponentialDecay"),
      initial_learning_rate_(initial_learning_rate),
      decay_steps_(decay_steps),
      decay_rate_(decay_rate),
      staircase_(staircase),
      name_(std::move(name)) {
  validate();
}

ExponentialDecay::ExponentialDecay(const Config& config) : ExponentialDecay("ExponentialDecay", config) {}

ExponentialDecay::ExponentialDecay(const std::string& class_name, const Config& config)
    : LearningRateSchedule(class_name) {
  ConfigReader args(config, class_name);
  if (!args.has("initial_learning_rate")) args.fail("the argument 'initial_learning_rate' is required");
  if (!args.has("decay_rate")) args.fail("the argument 'decay_rate' is required");
  initial_learning_rate_ = args.number("initial_learning_rate", 0.0);
  decay_steps_ = args.integer("decay_steps");
  decay_rate_ = args.number("decay_rate", 1.0);
  staircase_ = args.boolean("staircase", false);
  name_ = args.text("name", class_name);
  args.finish();
  validate();
}

void ExponentialDecay::validate() const {
  if (decay_steps_ <= 0) invalid(class_name(), "decay_steps must be > 0, got " + std::to_string(decay_steps_));
}

double ExponentialDecay::progress(std::int64_t step) const {
  const double ratio = static_cast<double>(step) / static_cast<double>(decay_steps_);
  return staircase_ ? std::floor(ratio) : ratio;
}

double ExponentialDecay::operator()(std::int64_t step) const {
  return initial_learning_rate_ * std::pow(decay_rate_, progress(step));
}

double InverseTimeDecay::operator()(std::int64_t step) const {
  return initial_learning_rate_ / (1.0 + decay_rate_ * progress(step));
}

Config ExponentialDecay::get_config() const {
  return Config{{"initial_learning_rate", initial_learning_rate_},
                {"decay_steps", decay_steps_},
                {"decay_rate", decay_rate_},
                {"staircase", staircase_},
                {"name", name_}};
}

// ---- PiecewiseConstantDecay -------------------------------------------------------------------------------

PiecewiseConstantDecay::PiecewiseConstantDecay(std::vector<double> boundaries, std::vector<double> values,
                                               std::string name)
    : LearningRateSchedule("PiecewiseConstantDecay"),
      boundaries_(std::move(boundaries)),
      values_(std::move(values)),
      name_(std::move(name)) {
  validate();
}

PiecewiseConstantDecay::PiecewiseConstantDecay(const Config& config) : LearningRateSchedule("PiecewiseConstantDecay") {
  ConfigReader args(config, "PiecewiseConstantDecay");
  if (!args.has("boundaries")) args.fail("the argument 'boundaries' is required");
  if (!args.has("values")) args.fail("the argument 'values' is required");
  boundaries_ = numbers(args.value("boundaries"), "PiecewiseConstantDecay argument 'boundaries'");
  values_ = numbers(args.value("values"), "PiecewiseConstantDecay argument 'values'");
  name_ = args.text("name", "PiecewiseConstant");
  args.finish();
  validate();
}

void PiecewiseConstantDecay::validate() const {
  if (boundaries_.size() + 1 != values_.size())
    invalid("PiecewiseConstantDecay", "values must have one entry more than boundaries, got " +
                                          std::to_string(boundaries_.size()) + " boundaries and " +
                                          std::to_string(values_.size()) + " values");
  if (!std::is_sorted(boundaries_.begin(), boundaries_.end()) ||
      std::adjacent_find(boundaries_.begin(), boundaries_.end()) != boundaries_.end())
    invalid("PiecewiseConstantDecay",
            "boundaries must increase strictly, got " + number_list(boundaries_, true).to_string());
}

double PiecewiseConstantDecay::operator()(std::int64_t step) const {
  const double at = static_cast<double>(step);
  // The first boundary not below the step: boundaries are inclusive upper ends of their interval.
  const auto interval = std::lower_bound(boundaries_.begin(), boundaries_.end(), at) - boundaries_.begin();
  return values_[static_cast<std::size_t>(interval)];
}

Config PiecewiseConstantDecay::get_config() const {
  return Config{
      {"boundaries", number_list(boundaries_, true)}, {"values", number_list(values_, false)}, {"name", name_}};
}

// ---- CosineDecay ------------------------------------------------------------------------------------------

CosineDecay::CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha, std::string name)
    : LearningRateSchedule("CosineDecay"),
      initial_learning_rate_(initial_learning_rate),
      decay_steps_(decay_steps),
      alpha_(alpha),
      name_(std::move(name)) {
  validate();
}

CosineDecay::CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha, std::string name,
                         double warmup_target, std::int64_t warmup_steps)
    : LearningRateSchedule("CosineDecay"),
      initial_learning_rate_(initial_learning_rate),
      decay_steps_(decay_steps),
      alpha_(alpha),
      name_(std::move(name)),
      has_warmup_target_(true),
      warmup_target_(warmup_target),
      warmup_steps_(warmup_steps) {
  validate();
}

CosineDecay::CosineDecay(const Config& config) : LearningRateSchedule("CosineDecay") {
  ConfigReader args(config, "CosineDecay");
  if (!args.has("initial_learning_rate")) args.fail("the argument 'initial_learning_rate' is required");
  initial_learning_rate_ = args.number("initial_learning_rate", 0.0);
  decay_steps_ = args.integer("decay_steps");
  alpha_ = args.number("alpha", 0.0);
  name_ = args.text("name", "CosineDecay");
  has_warmup_target_ = args.has("warmup_target");
  warmup_target_ = args.number("warmup_target", 0.0);
  warmup_steps_ = args.integer("warmup_steps", 0);
  args.finish();
  validate();
}

void CosineDecay::validate() const {
  if (decay_steps_ <= 0) invalid("CosineDecay", "decay_steps must be > 0, got " + std::to_string(decay_steps_));
  if (warmup_steps_ < 0) invalid("CosineDecay", "warmup_steps must be >= 0, got " + std::to_string(warmup_steps_));
}

double CosineDecay::decayed(double step, double from) const {
  const double completed_fraction = step / static_cast<double>(decay_steps_);
  const double cosine_decayed = 0.5 * (1.0 + std::cos(pi * completed_fraction));
  return from * ((1.0 - alpha_) * cosine_decayed + alpha_);
}

double CosineDecay::operator()(std::int64_t step) const {
  const double decay_steps = static_cast<double>(decay_steps_);
  if (!has_warmup_target_) return decayed(std::min(static_cast<double>(step), decay_steps), initial_learning_rate_);
  const double warmup_steps = static_cast<double>(warmup_steps_);
  const double at = std::min(static_cast<double>(step), decay_steps + warmup_steps);
  if (at < warmup_steps)
    return (warmup_target_ - initial_learning_rate_) * (at / warmup_steps) + initial_learning_rate_;
  return decayed(at - warmup_steps, warmup_target_);
}

Config CosineDecay::get_config() const {
  return Config{{"initial_learning_rate", initial_learning_rate_},
                {"decay_steps", decay_steps_},
                {"alpha", alpha_},
                {"name", name_},
                {"warmup_target", has_warmup_target_ ? Config(warmup_target_) : Config()},
                {"warmup_steps", warmup_steps_}};
}

KILN_REGISTER_SCHEDULE("kiln>ExponentialDecay", ExponentialDecay);
KILN_REGISTER_SCHEDULE("kiln>InverseTimeDecay", InverseTimeDecay);
KILN_REGISTER_SCHEDULE("kiln>PiecewiseConstantDecay", PiecewiseConstantDecay);
KILN_REGISTER_SCHEDULE("kiln>CosineDecay", CosineDecay);

}  // namespace kiln
