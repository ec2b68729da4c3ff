#pragma once
// Learning-rate schedules, as in keras.optimizers.schedules. A schedule maps the optimizer's step count
// to a learning rate on the host, in double: the value reaches the graph as a scalar variable that the
// optimizer writes before each step, so a schedule never adds nodes or replans.
//
//   kiln::ExponentialDecay decay(0.1, 1000, 0.96);
//   kiln::Adam adam(kiln::Config{{"learning_rate", decay.serialize()}});
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include <kiln/core/registry.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

class LearningRateSchedule;
/// Schedules are immutable once made, so several optimizers may share one.
using SchedulePtr = std::shared_ptr<const LearningRateSchedule>;

/// The base of every learning-rate schedule: a pure function of the step count, with a Keras-shaped config.
/// A schedule of your own implements operator() and get_config(), has a constructor from its Config, and is
/// registered with KILN_REGISTER_SCHEDULE, so that an optimizer using it saves and loads by config.
class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;

  /// The learning rate of the step that starts with `step` steps done (Keras passes `iterations`).
  virtual double operator()(std::int64_t step) const = 0;

  const std::string& class_name() const { return class_name_; }  ///< "ExponentialDecay"
  /// Every constructor argument: from_config(serialize()) rebuilds an equal schedule.
  virtual Config get_config() const = 0;
  /// {"module": "keras.optimizers.schedules", "class_name": ..., "config": ..., "registered_name": null}; a
  /// schedule of your own (KILN_REGISTER_SCHEDULE) writes its key as registered_name. ConfigError when the
  /// schedule's class is not registered.
  Config serialize() const;

  /// From {"class_name": ..., "config": {...}, "registered_name": ...} (what serialize() and Keras write).
  /// Unknown classes and arguments throw ConfigError with the nearest names.
  static SchedulePtr from_config(const Config& serialized);

 protected:
  /// `class_name` is what serialize() writes and messages name: "ExponentialDecay".
  explicit LearningRateSchedule(std::string class_name) : class_name_(std::move(class_name)) {}

 private:
  std::string class_name_;
};

/// initial_learning_rate * decay_rate ^ (step / decay_steps); with staircase the exponent is floored.
class ExponentialDecay : public LearningRateSchedule {
 public:
  /// initial_learning_rate is the rate at step 0; every decay_steps steps (> 0, else ConfigError) multiply it
  /// by decay_rate, smoothly, or at once at each multiple of decay_steps with staircase. `name` is kept for
  /// the config.
  ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate, bool staircase = false,
                   std::string name = "ExponentialDecay");
  /// From Keras's config: initial_learning_rate, decay_steps and decay_rate are required. ConfigError for a
  /// missing, unknown or ill-typed argument.
  explicit ExponentialDecay(const Config& config);
  double operator()(std::int64_t step) const override;
  Config get_config() const override;

 protected:
  /// For the schedules with ExponentialDecay's arguments and another formula: `class_name` names them.
  ExponentialDecay(const std::string& class_name, const Config& config);
  /// step / decay_steps, floored with staircase.
  double progress(std::int64_t step) const;

  double initial_learning_rate_ = 0.0;  ///< the rate at step 0
  std::int64_t decay_steps_ = 1;        ///< the steps one decay takes
  double decay_rate_ = 1.0;             ///< the factor of one decay
  bool staircase_ = false;              ///< decay in whole steps of decay_steps
  std::string name_;                    ///< kept for the config

 private:
  void validate() const;
};

/// Keras's InverseTimeDecay: initial_learning_rate / (1 + decay_rate · step / decay_steps), the step ratio
/// floored with staircase. Keras 2's optimizers' `decay` argument is this schedule with decay_steps 1.
class InverseTimeDecay final : public ExponentialDecay {
 public:
  /// From Keras's config, with ExponentialDecay's arguments (name defaults to "InverseTimeDecay").
  explicit InverseTimeDecay(const Config& config) : ExponentialDecay("InverseTimeDecay", config) {}
  double operator()(std::int64_t step) const override;
};

/// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i], and
/// values.back() after the last boundary.
class PiecewiseConstantDecay final : public LearningRateSchedule {
 public:
  /// `boundaries` are step counts in strictly increasing order; `values` has one entry more. ConfigError
  /// otherwise. `name` (Keras's default "PiecewiseConstant") is kept for the config.
  PiecewiseConstantDecay(std::vector<double> boundaries, std::vector<double> values,
                         std::string name = "PiecewiseConstant");
  /// From Keras's config: boundaries and values are required. ConfigError for a missing, unknown or
  /// ill-typed argument.
  explicit PiecewiseConstantDecay(const Config& config);
  double operator()(std::int64_t step) const override;
  Config get_config() const override;

 private:
  void validate() const;

  std::vector<double> boundaries_;
  std::vector<double> values_;
  std::string name_;
};

/// An optional linear warmup from initial_learning_rate to warmup_target over warmup_steps, then a cosine
/// decay over decay_steps from warmup_target (or initial_learning_rate without warmup) down to alpha times it.
class CosineDecay final : public LearningRateSchedule {
 public:
  /// No warmup: from initial_learning_rate down to alpha·initial_learning_rate over decay_steps (> 0, else
  /// ConfigError), and flat after. `name` is kept for the config.
  CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha = 0.0,
              std::string name = "CosineDecay");
  /// With warmup: warmup_steps steps from initial_learning_rate up to warmup_target.
  CosineDecay(double initial_learning_rate, std::int64_t decay_steps, double alpha, std::string name,
              double warmup_target, std::int64_t warmup_steps);
  /// From Keras's config: initial_learning_rate and decay_steps are required; alpha (0.0), name, warmup_target
  /// (null: no warmup) and warmup_steps (0, >= 0) are optional. ConfigError for a missing, unknown or ill-typed
  /// argument.
  explicit CosineDecay(const Config& config);
  double operator()(std::int64_t step) const override;
  Config get_config() const override;

 private:
  void validate() const;
  double decayed(double step, double from) const;

  double initial_learning_rate_ = 0.0;
  std::int64_t decay_steps_ = 1;
  double alpha_ = 0.0;
  std::string name_;
  bool has_warmup_target_ = false;
  double warmup_target_ = 0.0;
  std::int64_t warmup_steps_ = 0;
};

// ---- the registry ----------------------------------------------------------------------------------

/// A registered schedule class: how to make one from its config, and its C++ type (for serialize).
struct ScheduleClass {
  std::type_index type;                              ///< the C++ class, by which serialize() finds a schedule's key
  std::function<SchedulePtr(const Config&)> create;  ///< makes one from its "config"; from_config calls it
};

/// Every schedule class by key ("kiln>CosineDecay"; "CosineDecay" finds it too: core/registry.hpp).
Registry<ScheduleClass>& schedule_registry();

namespace detail {
template <class S>
bool register_schedule(const std::string& key) {
  return schedule_registry().add(
      key, ScheduleClass{std::type_index(typeid(S)),
                         [](const Config& config) -> SchedulePtr { return std::make_shared<S>(config); }});
}
}  // namespace detail

}  // namespace kiln

// Registers a schedule class, constructible from a Config, under "Package>Name".
#define KILN_REGISTER_SCHEDULE(key, Class) KILN_AT_STARTUP(::kiln::detail::register_schedule<Class>(key))
