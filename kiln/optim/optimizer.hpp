#pragma once
// Optimizer: Keras 3's optimizers, as graph builders. build_updates appends one training step's update
// (clip -> decoupled weight decay -> the optimizer's rule) to a graph as ordinary op nodes, and returns
// one Update per weight and per slot, so the update runs inside the planned step with everything else.
//
// Values that change from step to step but not from element to element (the learning rate, Adam's
// bias correction) are computed on the host in double and written into scalar graph variables before
// each run, so a schedule or a callback changing the learning rate never replans:
//
//   kiln::Adam adam(kiln::Config{{"learning_rate", 1e-3}});
//   kiln::Program step(graph, {loss}, adam.build_updates(graph, weights, kiln::gradients(loss, weights), paths));
//   for (...) { adam.prepare_step(); step.run(); adam.finish_step(); }
//
// The optimizer owns its state (slots, iteration count, learning rate) as Arrays; variables() exposes them
// by stable path ("velocity/dense/kernel") for saving, and set_variables() restores them.
//
// Writing an optimizer: derive, list the slots each weight gets, write update_step with ops, and register:
//
//   class Sign : public kiln::Optimizer {
//    public:
//     explicit Sign(const kiln::Config& config) : Optimizer(config, "Sign", {"sign", 0.01}) {
//       config_reader(config).finish();
//     }
//    protected:
//     kiln::Tensor update_step(WeightUpdate& update) override {
//       return update.weight() - update.learning_rate() * kiln::ops::tanh(update.grad() * 1e3);
//     }
//   };
//   KILN_REGISTER_OPTIMIZER("acme>Sign", Sign);
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/registry.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/layer.hpp>
#include <kiln/optim/schedules.hpp>

namespace kiln {

class Optimizer;
/// How optimizers are handed around: create_optimizer and from_config return one, and compile() takes one.
using OptimizerPtr = std::shared_ptr<Optimizer>;

/// What a subclass's constructor states once: its Keras defaults.
struct OptimizerDefaults {
  /// `weight_decay` defaults to none: only AdamW decays unless asked.
  OptimizerDefaults(std::string name, double learning_rate, std::optional<double> weight_decay = std::nullopt)
      : name(std::move(name)), learning_rate(learning_rate), weight_decay(weight_decay) {}
  std::string name;                    ///< "adam"
  double learning_rate;                ///< used when the config gives none: Adam's 0.001
  std::optional<double> weight_decay;  ///< AdamW: 0.004
};

/// The base of every optimizer. It reads Keras's base arguments, clips the gradients, applies decoupled
/// weight decay, and owns the state: each weight's slots, the step count and the learning rate. A subclass
/// writes its update rule (update_step) and names its slots (slot_names).
///
/// The base arguments, by Keras's names: learning_rate (the subclass's default; a number, or a schedule's
/// serialized form, which then drives it), weight_decay (none; AdamW's is 0.004), and clipnorm, clipvalue
/// and global_clipnorm (none; at most one of them, each >= 0, and 0 means no clipping). use_ema must be
/// false and ema_overwrite_frequency, loss_scale_factor and gradient_accumulation_steps null: kiln does not
/// implement them. ema_momentum (0.99) is accepted and kept for the config. A bad or unknown argument throws
/// ConfigError naming the optimizer (and, for an unknown key, the nearest ones).
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // ---- identity and config ------------------------------------------------------------------------------
  const std::string& class_name() const { return class_name_; }  ///< "Adam"
  const std::string& name() const { return name_; }              ///< "adam"
  std::string describe() const;                                  ///< "Adam 'adam'", for messages
  /// Keras's keys: name, learning_rate (a number, or the schedule's serialized form), weight_decay,
  /// clipnorm, global_clipnorm, clipvalue, use_ema, ema_momentum, ema_overwrite_frequency,
  /// loss_scale_factor, gradient_accumulation_steps, then the subclass's own.
  virtual Config get_config() const;
  /// {"module": "keras.optimizers", "class_name": ..., "config": ..., "registered_name": "kiln>Adam"}
  Config serialize() const;
  /// A name ("adam", "Adam", "kiln>Adam") or {"class_name": ..., "config": {...}} (registered_name wins
  /// when present). Unknown names throw ConfigError with the nearest ones.
  static OptimizerPtr from_config(const Config& serialized);

  /// The decoupled weight decay: each step first sets w -= w·weight_decay·lr. None when off.
  std::optional<double> weight_decay() const { return weight_decay_; }
  /// Each gradient is rescaled, on its own, to a norm of at most this. None (or 0) when off.
  std::optional<double> clipnorm() const { return clipnorm_; }
  /// Every gradient element is clipped to [-clipvalue, clipvalue]. None (or 0) when off.
  std::optional<double> clipvalue() const { return clipvalue_; }
  /// All gradients are rescaled by one factor, so that their joint norm is at most this. None (or 0) when
  /// off. A joint norm that is not finite makes the whole step NaN rather than silently zero.
  std::optional<double> global_clipnorm() const { return global_clipnorm_; }

  // ---- the update, as graph ops ---------------------------------------------------------------------------
  /// One Update per weight whose gradient is given (an empty gradient Tensor skips its weight, as Keras
  /// skips None) and one per slot of those weights. `paths` name the weights stably ("dense/kernel"); the
  /// slots are keyed by them, so building again (in this graph or another) reuses the same slots. Throws
  /// ValueError on mismatched lists, non-variables or a repeated weight, ShapeError/DTypeError when a
  /// gradient does not fit its weight.
  std::vector<Update> build_updates(Graph& graph, const std::vector<Tensor>& weights, const std::vector<Tensor>& grads,
                                    const std::vector<std::string>& paths);
  /// Creates the slots of these weights (zeros, or the optimizer's initial value) without a graph, e.g.
  /// before set_variables() restores a saved run. Existing slots are kept.
  void build(const std::vector<Weight>& weights);

  // ---- around each run --------------------------------------------------------------------------------------
  /// Writes this step's scalars (learning rate, bias corrections) into their graph variables. Allocates
  /// nothing.
  void prepare_step();
  /// Counts the step: call after Program::run.
  void finish_step();

  /// The steps done (finish_step calls), saved with the slots. Schedules read it; bias corrections use it + 1.
  std::int64_t iterations() const;
  void set_iterations(std::int64_t iterations);  ///< ValueError when negative
  /// The learning rate the next step uses: the schedule at `iterations()`, or the constant.
  double current_learning_rate() const;
  /// For callbacks (ReduceLROnPlateau). Throws ValueError when a schedule drives the learning rate.
  void set_learning_rate(double learning_rate);
  /// The schedule that drives the learning rate, or null when it is a constant.
  const SchedulePtr& schedule() const { return schedule_; }

  // ---- state ------------------------------------------------------------------------------------------------
  /// "iterations", "learning_rate" (unless a schedule drives it), then each weight's slots in build order
  /// ("momentum/dense/kernel", "velocity/dense/kernel", ...). Values share storage with the optimizer.
  std::vector<Weight> variables() const;
  /// Restores what variables() gave, matched by path; a slot not built yet is created from its saved value.
  /// Throws ValueError on an unknown or missing path, ShapeError/DTypeError on a value that does not fit.
  void set_variables(const std::vector<Weight>& variables);

 protected:
  /// Reads the base arguments (Keras names) from `config`; the subclass reads its own with config_reader().
  Optimizer(const Config& config, std::string class_name, const OptimizerDefaults& defaults);

  /// A reader over the constructor's config with the base keys already accounted for.
  ConfigReader config_reader(const Config& config) const;

  /// One weight's update, as update_step sees it.
  class WeightUpdate {
   public:
    const Tensor& weight() const { return weight_; }  ///< after weight decay
    const Tensor& grad() const { return grad_; }      ///< after clipping
    /// The weight's stable path ("dense/kernel"), which keys its slots.
    const std::string& path() const { return path_; }
    /// The slot's value before this step (a graph variable of the weight's shape and dtype).
    Tensor slot(const std::string& slot_name) const;
    /// The slot's value after this step; each slot is assigned once.
    void assign(const std::string& slot_name, const Tensor& value);
    /// A per-step host scalar (add_step_scalar) as a () variable of the weight's dtype.
    Tensor scalar(std::size_t scalar_id) const;
    /// This step's learning rate, as a () variable of the weight's dtype: the schedule's value or the constant.
    Tensor learning_rate() const { return scalar(learning_rate_scalar); }

   private:
    friend class Optimizer;
    WeightUpdate(Optimizer& optimizer, Graph& graph, std::vector<Update>& updates);

    Optimizer& optimizer_;
    Graph& graph_;
    std::vector<Update>& updates_;
    Tensor weight_, grad_;
    std::string path_;
    std::vector<std::string> assigned_;
  };

  /// The weight's value after this step, composed from ops.
  virtual Tensor update_step(WeightUpdate& update) = 0;
  /// The slots each weight gets, in Keras's order ("momentum", "velocity").
  virtual std::vector<std::string> slot_names() const { return {}; }
  /// The value a new slot is filled with: 0 unless overridden (Adagrad's accumulator starts at
  /// initial_accumulator_value).
  virtual double slot_initial_value(const std::string& /*slot_name*/) const { return 0.0; }
  /// Sets this step's scalars from Keras's local step t = iterations + 1 and the step's learning rate.
  virtual void compute_step_scalars(std::int64_t /*local_step*/, double /*learning_rate*/) {}

  /// Registers a per-step scalar (in the constructor) and sets its value (in compute_step_scalars).
  std::size_t add_step_scalar(const std::string& scalar_name);
  /// Writes the value the scalar `scalar_id` holds in the next run; call it from compute_step_scalars.
  void set_step_scalar(std::size_t scalar_id, double value);
  /// The id of the learning rate, the scalar the base registers first; prepare_step sets it.
  static constexpr std::size_t learning_rate_scalar = 0;

  [[noreturn]] void fail(const std::string& message) const;  ///< ConfigError naming the optimizer

 private:
  struct Slot {
    std::string slot_name;
    std::string weight_path;
    Array value;
  };
  struct StepScalar {
    std::string name;
    double value = 0.0;
    Array float32, float64;  ///< created when a graph first needs that dtype
  };

  void read_base_config(const Config& config, const OptimizerDefaults& defaults);
  void check_clip_options() const;
  Slot& ensure_slot(const std::string& slot_name, const std::string& weight_path, const Shape& shape, DType dtype);
  Slot* find_slot(const std::string& slot_name, const std::string& weight_path);
  Tensor slot_variable(Graph& graph, Slot& slot);
  Tensor scalar_variable(Graph& graph, std::size_t scalar_id, DType dtype);
  std::vector<std::size_t> checked_inputs(const Graph& graph, const std::vector<Tensor>& weights,
                                          const std::vector<Tensor>& grads,
                                          const std::vector<std::string>& paths) const;
  std::vector<Tensor> clip_gradients(const std::vector<Tensor>& grads) const;
  Tensor decayed_weight(Graph& graph, const Tensor& weight);
  void set_variable(const Weight& variable, std::vector<std::string>& restored);

  std::string class_name_;
  std::string name_;
  SchedulePtr schedule_;
  std::optional<double> weight_decay_, clipnorm_, clipvalue_, global_clipnorm_;
  double ema_momentum_ = 0.99;
  Array iterations_;     ///< () float64: saved with the slots, so it is state like them
  Array learning_rate_;  ///< () float64: the constant learning rate (unused under a schedule)
  std::vector<StepScalar> step_scalars_;
  std::vector<Slot> slots_;  ///< in build order: each weight's slots together, weights in the order built
};

// ---- the built-in optimizers (Keras 3 formulas and defaults) --------------------------------------------------

/// m = momentum·m − lr·g; w += m (nesterov: w += momentum·m − lr·g). No slot when momentum is 0.
class SGD : public Optimizer {
 public:
  /// The base arguments (learning_rate 0.01, name "SGD") and momentum (0.0, in [0, 1]) and nesterov (false).
  /// ConfigError for a momentum outside [0, 1] or an unknown argument.
  explicit SGD(const Config& config = {});
  /// SGD with this learning rate and every other argument at its default.
  explicit SGD(double learning_rate) : SGD(Config{{"learning_rate", learning_rate}}) {}
  Config get_config() const override;
  double momentum() const { return momentum_; }  ///< the velocity's decay; 0 is plain SGD, with no slot
  bool nesterov() const { return nesterov_; }    ///< whether the step looks ahead by the new velocity

 protected:
  Tensor update_step(WeightUpdate& update) override;
  std::vector<std::string> slot_names() const override;

 private:
  double momentum_ = 0.0;
  bool nesterov_ = false;
};

/// m += (g − m)(1 − β1); v += (g² − v)(1 − β2); w −= α·m / (√v + ε), α = lr·√(1 − β2ᵗ)/(1 − β1ᵗ);
/// amsgrad divides by √max(v̂, v) instead.
class Adam : public Optimizer {
 public:
  /// The base arguments (learning_rate 0.001, name "adam") and beta_1 (0.9), beta_2 (0.999), epsilon (1e-7)
  /// and amsgrad (false). ConfigError for a beta outside [0, 1) or an unknown argument.
  explicit Adam(const Config& config = {});
  /// Adam with this learning rate and every other argument at its default.
  explicit Adam(double learning_rate) : Adam(Config{{"learning_rate", learning_rate}}) {}
  Config get_config() const override;
  double beta_1() const { return beta_1_; }    ///< the decay of the first moment m ("momentum" slot)
  double beta_2() const { return beta_2_; }    ///< the decay of the second moment v ("velocity" slot)
  double epsilon() const { return epsilon_; }  ///< added to √v, the uncorrected root (as Keras, not torch)
  bool amsgrad() const { return amsgrad_; }    ///< whether a "velocity_hat" slot keeps the running maximum of v

 protected:
  /// For AdamW: the same rule under another class name and defaults.
  Adam(const Config& config, std::string class_name, const OptimizerDefaults& defaults);
  Tensor update_step(WeightUpdate& update) override;
  std::vector<std::string> slot_names() const override;
  void compute_step_scalars(std::int64_t local_step, double learning_rate) override;

 private:
  void read_config(const Config& config);

  double beta_1_ = 0.9, beta_2_ = 0.999, epsilon_ = 1e-7;
  bool amsgrad_ = false;
  std::size_t alpha_scalar_ = 0;
};

/// Adam with decoupled weight decay on by default (0.004); weight_decay may not be null.
class AdamW : public Adam {
 public:
  /// Adam's arguments and defaults, with name "adamw" and weight_decay 0.004. ConfigError for a null
  /// weight_decay, and as Adam's.
  explicit AdamW(const Config& config = {});
  /// AdamW with this learning rate and every other argument at its default.
  explicit AdamW(double learning_rate) : AdamW(Config{{"learning_rate", learning_rate}}) {}
};

/// v = ρv + (1 − ρ)g²; centered: ḡ = ρḡ + (1 − ρ)g and the denominator is √(v − ḡ² + ε), else √(v + ε);
/// inc = lr·g / denominator; with momentum mom = μ·mom + inc and w −= mom, else w −= inc.
class RMSprop : public Optimizer {
 public:
  /// The base arguments (learning_rate 0.001, name "rmsprop") and rho (0.9, in [0, 1]), momentum (0.0, >= 0),
  /// epsilon (1e-7) and centered (false). Slots: "velocity", then "momentum" when momentum > 0, then
  /// "average_gradient" when centered. ConfigError for a value out of range or an unknown argument.
  explicit RMSprop(const Config& config = {});
  /// RMSprop with this learning rate and every other argument at its default.
  explicit RMSprop(double learning_rate) : RMSprop(Config{{"learning_rate", learning_rate}}) {}
  Config get_config() const override;

 protected:
  Tensor update_step(WeightUpdate& update) override;
  std::vector<std::string> slot_names() const override;

 private:
  double rho_ = 0.9, momentum_ = 0.0, epsilon_ = 1e-7;
  bool centered_ = false;
};

/// acc += g²; w −= lr·g / √(acc + ε), acc starting at initial_accumulator_value.
class Adagrad : public Optimizer {
 public:
  /// The base arguments (learning_rate 0.001, name "adagrad") and initial_accumulator_value (0.1, >= 0) and
  /// epsilon (1e-7). ConfigError for a negative initial_accumulator_value or an unknown argument.
  explicit Adagrad(const Config& config = {});
  /// Adagrad with this learning rate and every other argument at its default.
  explicit Adagrad(double learning_rate) : Adagrad(Config{{"learning_rate", learning_rate}}) {}
  Config get_config() const override;

 protected:
  Tensor update_step(WeightUpdate& update) override;
  std::vector<std::string> slot_names() const override { return {"accumulator"}; }
  /// initial_accumulator_value, the accumulator's start.
  double slot_initial_value(const std::string&) const override { return initial_accumulator_value_; }

 private:
  double initial_accumulator_value_ = 0.1, epsilon_ = 1e-7;
};

// ---- the registry -----------------------------------------------------------------------------------------------

/// Makes an optimizer from its config (the "config" part of its serialized form).
using OptimizerFactory = std::function<OptimizerPtr(const Config&)>;

/// A registered optimizer class: how to make one from its config, and its C++ type (for serialize).
struct OptimizerClass {
  std::type_index type;     ///< the C++ class, by which serialize() finds an optimizer's key
  OptimizerFactory create;  ///< what create_optimizer and from_config call
};

/// Every optimizer class by key ("kiln>Adam"); "Adam" and Keras's "adam" find it too (core/registry.hpp).
Registry<OptimizerClass>& optimizer_registry();

/// create_optimizer("adam", {{"learning_rate", 0.01}}). Unknown names throw ConfigError with the nearest ones.
OptimizerPtr create_optimizer(const std::string& name, const Config& config = {});

namespace detail {
template <class O>
bool register_optimizer(const std::string& key) {
  return optimizer_registry().add(
      key, OptimizerClass{std::type_index(typeid(O)),
                          [](const Config& config) -> OptimizerPtr { return std::make_shared<O>(config); }});
}
}  // namespace detail

}  // namespace kiln

// Registers an optimizer class, constructible from a Config, under "Package>Name".
#define KILN_REGISTER_OPTIMIZER(key, Class) KILN_AT_STARTUP(::kiln::detail::register_optimizer<Class>(key))
