#pragma once
// Layer: a reusable piece of a model with weights, in Keras's lifecycle.
//
//   construct (arguments or a Config)  ->  build(input_shapes) once, from the first call's shapes,
//   creating every weight  ->  call(inputs) composes ops on symbolic tensors  ->  get_config()
//
// A layer is shared (a model records which layer made which tensor), so layers live in a
// std::shared_ptr and users hold them through handles (LayerHandle, below), as in libtorch:
//
//   kiln::Dense dense(64, "relu");          // a handle; copies share the layer
//   kiln::Tensor y = dense(x);              // builds on first call, then adds op nodes
//   dense->units();                          // the layer itself
//
// Weights are Arrays the layer owns. Calling the layer in a graph adds variable nodes that share those
// arrays' storage, so a layer called in two graphs (the model the user wrote, the graph fit() trains)
// has one set of weights.
//
// Writing a layer (no kernels here: a layer composes ops, and a new primitive goes into ops/):
//
//   class Scale : public kiln::Layer {
//    public:
//     explicit Scale(const kiln::Config& config) : Layer(config, "Scale") { config_reader(config).finish(); }
//    protected:
//     void build(const kiln::Shape& input_shape) override {
//       factor_ = add_weight("factor", {input_shape.dim(-1)}, kiln::Initializer::get("ones"));
//     }
//     kiln::Tensor call(const kiln::Tensor& x, const kiln::CallArgs&) override { return x * variable(factor_, x); }
//    private:
//     kiln::WeightId factor_ = 0;
//   };
//   KILN_REGISTER_LAYER("acme>Scale", Scale);
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/registry.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/layers/constraints.hpp>
#include <kiln/layers/initializers.hpp>
#include <kiln/layers/regularizers.hpp>

namespace kiln {

class Layer;

/// Keras's global dtype policy (keras.config.set_dtype_policy): the policy of the layers made after it without a
/// dtype of their own. "float32" (the default), "float64", "bfloat16" or "mixed_bfloat16" (float32 variables,
/// bfloat16 matrix products, as Keras's mixed precision); ConfigError on another name. Not thread-safe against
/// layers being made on other threads.
void set_dtype_policy(const std::string& name);
/// The global dtype policy's name.
std::string dtype_policy();
/// A shared layer: how models, call records and the registry hold layers.
using LayerPtr = std::shared_ptr<Layer>;
/// A weight's regularizer and constraint as a layer's config gives them: Keras's `<prefix>_regularizer` and
/// `<prefix>_constraint` arguments ("kernel_regularizer", "kernel_constraint").
struct WeightRegularization {
  Regularizer regularizer;  ///< none unless given
  Constraint constraint;    ///< none unless given
  /// Reads `<prefix>_regularizer` and `<prefix>_constraint` from `args` (absent or null: none).
  static WeightRegularization from_arguments(ConfigReader& args, const std::string& prefix);
  /// Writes `<prefix>_regularizer` and `<prefix>_constraint` into `config`, null when none.
  void write(Config& config, const std::string& prefix) const;
  /// Writes two weights' keys in Keras's order: `<a>_regularizer`, `<b>_regularizer`, `<a>_constraint`,
  /// `<b>_constraint` (Dense's kernel and bias, BatchNormalization's beta and gamma).
  static void write(Config& config, const std::string& a, const WeightRegularization& first, const std::string& b,
                    const WeightRegularization& second);
};

/// One of a layer's own weights, as add_weight() returns it for variable() and weight_value().
using WeightId = std::size_t;

/// The arguments of one call besides its positional inputs, recorded with the call so that models can
/// replay and save it: named tensors (masks) and options (flags). `training` is not recorded: a model
/// replays its calls in a training graph for fit() and an inference graph for predict().
class CallArgs {
 public:
  CallArgs() = default;
  /// Passes `value` as the tensor argument `name` ("mask"); giving `name` again replaces it. An empty
  /// Tensor counts as not given. A name the layer does not take fails the call with ConfigError.
  CallArgs& tensor(const std::string& name, const Tensor& value);
  /// Sets the option `name` ("use_causal_mask") to `value`; setting `name` again replaces it. A name the
  /// layer does not take fails the call with ConfigError.
  CallArgs& option(const std::string& name, Config value);
  /// Training mode (true: dropout is active) or inference mode (false, the default).
  CallArgs& training(bool value) {
    training_ = value;
    return *this;
  }

  const Tensor* find_tensor(const std::string& name) const;  ///< nullptr when not given
  /// The tensor arguments, in the order their names were first given.
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }
  const Config& options() const { return options_; }  ///< a map (or null when empty)
  /// The option `name` as a bool, or `fallback` when it is absent or null; ConfigError when it is not a bool.
  bool flag(const std::string& name, bool fallback) const;
  bool training() const { return training_; }  ///< true in training mode

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  Config options_;
  bool training_ = false;
};

/// One call of a layer: what a functional model walks back through. Outputs are plain handles (no
/// history) so records never form a cycle.
struct LayerCall : TensorHistory {
  LayerPtr layer;               ///< the layer called
  std::vector<Tensor> inputs;   ///< its positional inputs, in the graph the call ran in
  CallArgs args;                ///< its tensor arguments and options
  std::vector<Tensor> outputs;  ///< its outputs, as plain handles
};
/// The layer call that produced `tensor` (its Tensor::producer()), or null when no layer did.
inline std::shared_ptr<const LayerCall> layer_call_of(const Tensor& tensor) {
  return std::dynamic_pointer_cast<const LayerCall>(tensor.producer());
}

/// A weight as models, optimizers and files see it. `path` is stable and hierarchical ("query/kernel"
/// inside its layer), so loading matches weights by name, never by creation order.
struct Weight {
  Weight() = default;
  /// A weight at `path` sharing `value`'s storage; no regularizer or constraint unless given.
  Weight(std::string weight_path, Array weight_value, bool is_trainable = true, Regularizer weight_regularizer = {},
         Constraint weight_constraint = {})
      : path(std::move(weight_path)),
        value(std::move(weight_value)),
        trainable(is_trainable),
        regularizer(std::move(weight_regularizer)),
        constraint(std::move(weight_constraint)) {}

  /// The weight's name inside the layer that listed it: the names of the children holding it, then its own
  /// ("dense/kernel").
  std::string path;
  Array value;  ///< shares storage with the layer
  /// False when the weight was made non-trainable or a layer holding it is frozen.
  bool trainable = true;
  /// The penalty training adds to the loss while the weight trains (a layer's kernel_regularizer); none
  /// by default.
  Regularizer regularizer;
  /// The projection applied after each optimizer update (a layer's kernel_constraint); none by default.
  Constraint constraint;
  /// Whether the layer holding it keeps it as bfloat16 (Keras's "bfloat16" policy): float32 memory holding
  /// bfloat16 values; set_weights rounds to them, Keras files store it as bfloat16.
  bool bfloat16 = false;
};

/// What calling a layer returns: its outputs, which read as one Tensor when there is exactly one, so
/// kiln::Dense(1)(kiln::Add()({a, b})) works as in Keras. Converting several outputs to one Tensor
/// throws ValueError: index them instead.
class Outputs : public std::vector<Tensor> {
 public:
  Outputs() = default;
  /// The outputs of one call, in the layer's order.
  Outputs(std::vector<Tensor> outputs) : std::vector<Tensor>(std::move(outputs)) {}
  /// The one output; ValueError when there are several.
  operator Tensor() const;
  /// The one output's shape; ValueError when there are several.
  const Shape& shape() const { return Tensor(*this).shape(); }
};

/// The base of every layer and model: a named piece of a model that owns weights and, when called, adds
/// ops to its inputs' graph. Layers are shared and never copied: hold them in a LayerPtr or a LayerHandle.
/// Errors name the layer as describe() does ("Dense 'dense_1'").
class Layer : public std::enable_shared_from_this<Layer> {
 public:
  virtual ~Layer();
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // ---- calling ------------------------------------------------------------------------------------
  /// Builds on the first call (from the inputs' shapes), then adds the layer's ops to the inputs' graph
  /// under a name scope of the layer's name. Outputs remember this call (Tensor::producer).
  Outputs operator()(const std::vector<Tensor>& inputs, const CallArgs& args = {});
  /// One input; throws ValueError if the layer returns more than one output (use the list form).
  Tensor operator()(const Tensor& input, const CallArgs& args = {});

  // ---- identity and config --------------------------------------------------------------------------
  /// Given, or made unique in the first graph the layer is called in ("dense", "dense_1", ...).
  const std::string& name() const { return name_; }
  const std::string& class_name() const { return class_name_; }  ///< "Dense"
  /// Whether the name came from the config; a given name is never changed, an automatic one may be.
  bool name_given() const { return name_given_; }
  /// Models rename an automatically named layer that clashes with another member ("dense" made in two
  /// input graphs becomes "dense_1"); weights that still hold their first draw are drawn again for the
  /// new name, weights that were set or trained are kept. A name the user gave is never changed: that
  /// clash is a ConfigError.
  void rename_automatic(const std::string& name);
  /// "kiln>Dense", or "" for a layer nobody registered (found by the layer's C++ type).
  virtual std::string registered_name() const;
  /// Every constructor argument, plus the base fields name, trainable and dtype: from_config(get_config())
  /// rebuilds an equal layer. Subclasses extend base_config().
  virtual Config get_config() const { return base_config(); }
  /// {"input_shape": [...]} or {"input_shapes": [[...], ...]}: the shapes build() saw; null before. As in
  /// Keras (get_build_config), a layer whose weights depend on less than the whole shape may say only that.
  virtual Config build_config() const;
  /// Where Keras's `.keras` format keeps each entry of weights() (in weights()'s order), relative to the
  /// layer's own group of model.weights.h5. As Keras's save_own_variables, the default numbers the layer's
  /// own weights "vars/0", "vars/1", ... (those created trainable first) and puts each child's under the
  /// child's name. A layer whose Keras counterpart keeps its variables in sublayers overrides it
  /// (MultiHeadAttention: "query_dense/vars/0", ...).
  virtual std::vector<std::string> keras_weight_paths() const;
  /// The sublayers Keras's saving_lib walks into, as (attribute path, the sublayer's name): each gets a group
  /// with a "vars" group named after it, weights or not. The default lists the children by name;
  /// MultiHeadAttention lists its EinsumDense projections, softmax and dropout.
  virtual std::vector<std::pair<std::string, std::string>> keras_sublayers() const;

  /// Whether the layer passes masks on (Keras's supports_masking): its outputs get compute_mask()'s masks. A
  /// layer that does not, called on a masked input, warns (kiln::warn) that the mask stops there, as Keras
  /// does. False by default.
  virtual bool supports_masking() const { return false; }
  /// The outputs' masks (an empty Tensor for none), from the inputs and `mask`: the call's "mask" argument,
  /// or the first input's mask. The default gives the first output `mask`, as Keras's default does: a
  /// layer that keeps the steps (Dense, Dropout, LayerNormalization) passes it on.
  virtual std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const;

  /// Whether the layer trains. A frozen layer's weights, its children's included, are non-trainable: fit()
  /// leaves them alone. Saved as "trainable".
  bool trainable() const { return trainable_; }
  /// Freezes (false) or unfreezes the layer and everything it holds: as Keras's trainable setter, it sets
  /// every child's (a model's member layers included) too, so a BatchNormalization inside a frozen model
  /// runs in inference mode. As in Keras, compile the model again for fit() to see the change.
  void set_trainable(bool trainable);
  /// The weights' dtype: given, or taken from the first input at build.
  DType dtype() const { return dtype_; }
  /// Whether the config gave the dtype; otherwise the first input (or the parent layer) sets it at build.
  bool has_dtype() const { return dtype_given_; }
  /// Keras's quantization mode of the layer's dtype policy ("int8"), or "" for a float layer. A config's
  /// QuantizedDTypePolicy ({"mode": "int8", "source_name": "float32"}, or the name "int8_from_float32") sets it,
  /// and get_config writes the policy back; dtype() is then the source dtype, the float the layer computes in.
  const std::string& quantization_mode() const { return quantization_mode_; }
  /// Keras's name of the layer's dtype policy (its source policy when quantized): "float32", "float64",
  /// "bfloat16" (bfloat16 variables and products) or "mixed_bfloat16" (float32 variables, bfloat16 products).
  /// kiln keeps a bfloat16 layer's variables in float32 memory holding bfloat16 values (rounded when drawn or set;
  /// written to Keras files as bfloat16), and computes everything but matrix products in float32: see
  /// docs/design.md, "bfloat16".
  std::string policy_name() const { return policy_name_.empty() ? std::string(dtype_name(dtype_)) : policy_name_; }
  /// Whether the layer's matrix products round their operands to bfloat16 (Keras's bfloat16 compute dtype).
  bool bfloat16_products() const { return !policy_name_.empty(); }
  /// Whether the layer's variables are bfloat16 (the policy "bfloat16"; "mixed_bfloat16" keeps them float32).
  bool bfloat16_variables() const { return policy_name_ == "bfloat16"; }
  /// Marks a layer handed to a wrapper (TimeDistributed, Bidirectional): adopted as the wrapper's part it still
  /// keeps its own dtype policy, as Keras fixes a layer's policy when it is made (the parts a layer makes itself
  /// take their parent's).
  void keep_own_policy() { policy_kept_ = true; }
  /// Keras's Layer.path: the layer's name under its parent's path ("transformer_layer_0/self_attention"); a
  /// model's member layers' is their name. Final once the layer is tracked by its parent (or built).
  std::string path() const { return seed_path_.empty() ? name_ : seed_path_; }
  /// The Keras dtype policies of the parts of this layer that are quantized, by path: what a keras-hub backbone
  /// writes in its DTypePolicyMap. The layer's own policy when quantized_mode() is set, and each int8 projection's
  /// ("<path>/query", ...). Children are asked by the caller (detail::quantized_policies_under).
  std::vector<std::pair<std::string, Config>> quantized_policies() const;
  /// The sublayers Keras's quantize makes int8 that this layer holds as weights of its own, by their names under
  /// its path (MultiHeadAttention's EinsumDense "query", "key", "value", "attention_output"); a DTypePolicyMap gives
  /// them their policies at "<path>/<name>". None by default.
  virtual std::vector<std::string> quantizable_projections() const { return {}; }
  /// The quantization mode projection `index` of quantizable_projections() runs in: "" (float), "int8",
  /// "int4/<block>" or "int4/-1" (per channel), as its policy names it.
  virtual std::string projection_mode(std::size_t) const { return {}; }
  /// Whether projection `index` is quantized (projection_mode() not empty).
  bool projection_quantized(std::size_t index) const { return !projection_mode(index).empty(); }
  /// Why kiln leaves `part` (this layer, or one of its children) float where Keras's quantize would make it int8,
  /// or "" (Gemma's attention, whose kernels keep their heads first; Gemma's EinsumDense feed-forward, which kiln
  /// holds as Dense layers). kiln::quantize names it in its report.
  virtual std::string quantization_refusal(const Layer& part) const {
    (void)part;
    return {};
  }

  // ---- building -----------------------------------------------------------------------------------
  /// Whether the weights exist: after the first call, build_for(), or a config with a build_config.
  bool built() const { return built_; }
  /// Creates every weight (and builds every child) for inputs of these shapes; a no-op once built.
  void build_for(const std::vector<Shape>& input_shapes);
  /// build_for() for one input of `input_shape`.
  void build_for(const Shape& input_shape) { build_for(std::vector<Shape>{input_shape}); }
  /// The input shapes the layer was built for, one per input; empty before build.
  const std::vector<Shape>& build_shapes() const { return build_shapes_; }
  /// The output shapes of the first call, batch unknown, for summaries.
  const std::vector<Shape>& output_shapes() const { return output_shapes_; }

  // ---- weights (Keras 3's order: the layer's own in creation order, then each child's, whatever the
  //      trainable flags; the trainable lists filter it; a layer reached twice counts once)
  /// Every weight: the layer's own in creation order, then each child's, whatever the trainable flags, so
  /// freezing never reorders them. A layer reached twice counts once, at its first path.
  std::vector<Weight> weights() const;
  /// The weights that train: weights() without the non-trainable ones, in the same order.
  std::vector<Weight> trainable_weights() const;
  /// The weights that do not train, non-trainable or frozen, in weights() order.
  std::vector<Weight> non_trainable_weights() const;
  std::vector<Array> get_weights() const;  ///< copies
  /// Shapes and count must match get_weights(); throws ShapeError/ValueError naming the weight.
  void set_weights(const std::vector<Array>& values);
  /// The number of scalars in weights(), trainable or not.
  std::int64_t count_params() const;
  /// Draws every weight again from its initializer with a stream keyed by (seed, layer name, weight path).
  /// Weights are a pure function of these: the same model code gives the same weights everywhere.
  void initialize_weights(std::uint64_t seed);

  const std::vector<LayerPtr>& layers() const { return children_; }  ///< children, in tracking order

  /// Whether calling the layer changes what it carries from one batch to the next (a stateful recurrent
  /// layer's states), here or in a child. predict and evaluate then take the model alone, as training does.
  virtual bool carries_state() const;
  /// Keras's reset_state: zeroes what stateful layers carry between batches, this layer's and its
  /// children's (a whole model's, called on the model). Nothing for other layers.
  virtual void reset_state();
  /// Keras's compatibility alias of reset_state().
  void reset_states() { reset_state(); }

  /// "Dense 'dense_1'": how messages name a layer.
  std::string describe() const;

 protected:
  /// Reads the base fields (name, trainable, dtype) from `config`; `class_name` is the Keras class name.
  /// `quantization_modes`: the Keras quantization modes the layer implements; a dtype policy with another mode
  /// throws ConfigError naming the layer (Keras quantizes Dense, EinsumDense and Embedding, not every layer).
  Layer(const Config& config, std::string class_name, const std::vector<std::string>& quantization_modes = {});

  /// Called when a Keras DTypePolicyMap (the "dtype" of a keras-hub backbone, by layer path) has set this layer's
  /// policy, before build: a layer whose state depends on its quantization mode updates it here. The map is
  /// resolved when the layer's path is known: when its parent tracks it, or when a model's member builds.
  virtual void quantization_resolved() {}
  /// The policy a DTypePolicyMap given to this layer (or to its parent) holds for `path()` + "/" + `relative`, as
  /// Keras's DTypePolicyMap[path] finds it (an exact key, else one regex key matching the whole path); null
  /// without a map or an entry. For layers that stand for Keras sublayers they do not make (MultiHeadAttention's
  /// "query").
  Config policy_for(const std::string& relative) const;
  /// The quantization mode of a policy `policy_for` returned ("" for a float or null policy); ConfigError, naming
  /// `what`, for a mode not in `modes`.
  std::string quantization_mode_of(const Config& policy, const std::string& what,
                                   const std::vector<std::string>& modes) const;
  /// Keras's quantization of a projection the layer holds as weights of its own (an EinsumDense or a Dense):
  /// the mode and, once add_int4_scales() made them, the int4 variables after its kernel and bias.
  struct ProjectionQuantization {
    std::string mode;             ///< "", "int8", "int4/<block>", "int4/-1"
    std::int64_t int4_block = 0;  ///< int4: the rows a block of scales covers, or -1 (per channel); else 0
    bool int8() const { return mode == "int8"; }
    bool int4() const { return int4_block != 0; }
    WeightId scale = 0, zero = 0, g_idx = 0;  ///< int4: kernel_scale; by blocks kernel_zero and g_idx too
  };
  /// The quantization of each of `names` (projections under the layer's path) in its DTypePolicyMap, every one
  /// read before the result is used; ConfigError for a mode kiln does not run for a projection.
  std::vector<ProjectionQuantization> projection_quantizations(const std::vector<std::string>& names) const;
  /// Keras's int4 variables after a (rows, ceil(columns / 2)) packed kernel and its bias (EinsumDense and Dense's
  /// _int4_build, the kernel flattened to rows × columns): `prefix` + "kernel_scale" (columns,) per channel, or by
  /// blocks (blocks, columns) with int8 "kernel_zero" (blocks, columns) and "g_idx" (rows,), each row's block; none
  /// trained. Records them in `q`.
  void add_int4_scales(const std::string& prefix, std::int64_t rows, std::int64_t columns, ProjectionQuantization& q);
  /// x (..., rows) times the (rows, columns) kernel a packed int4 one stands for, as Keras's EinsumDense._int4_call
  /// makes and multiplies it: per channel value / scale (ops::dequantize), by blocks (value - zero) · scale
  /// (detail::int4_groups_product, which reads the packed kernel directly for a token's few rows).
  Tensor int4_projection(const Tensor& x, WeightId packed, const ProjectionQuantization& q, std::int64_t columns) const;
  /// Whether a DTypePolicyMap came in the config and has not set the policy yet (the layer's quantization
  /// mode is then not known in its constructor; quantization_resolved() reads what depends on it).
  bool policy_map_pending() const { return !policy_map_.is_null() && !policy_map_resolved_; }

  /// The first input's dtype becomes the weights' dtype, unless the config gave one (what a first call does).
  void take_input_dtype(DType dtype) {
    if (!dtype_given_) dtype_ = dtype;
  }
  /// A reader over the constructor's config with the base keys already accounted for.
  ConfigReader config_reader(const Config& config) const;
  /// The base fields that get_config() overrides extend: name (null while automatic and unassigned),
  /// trainable, and dtype (null until given or built).
  Config base_config() const;
  /// `config` with "activity_regularizer" (null when there is none) just before its first "..._constraint"
  /// key, where the Keras layers that always write it (the convolutions, Embedding) put it.
  Config with_activity_regularizer(const Config& config) const;

  /// Override one build and one call. The list forms default to the one-input forms.
  virtual void build(const std::vector<Shape>& input_shapes);
  /// Creates the weights (and builds the children) for one input of `input_shape`; the default makes none.
  virtual void build(const Shape& input_shape);
  /// The layer's outputs for `inputs`, composed of ops; the default calls the one-input form on the first.
  virtual std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args);
  /// The layer's output for `input`; the default throws LayerStateError, as one of the two must be overridden.
  virtual Tensor call(const Tensor& input, const CallArgs& args);
  /// Names of the CallArgs tensors and options this layer understands; others are rejected at call time. A
  /// layer that lists "mask" is given its first input's mask (Graph::mask_of) when the call gives none.
  virtual std::vector<std::string> call_argument_names() const { return {}; }
  /// For each positional input, the call argument its mask fills when the call gives none (Keras's
  /// `<name>_mask` arguments): by default "mask" for the first input of a layer whose call takes "mask";
  /// MultiHeadAttention fills "query_mask", "value_mask" and "key_mask". "" for an input whose mask no
  /// argument takes.
  virtual std::vector<std::string> input_mask_arguments() const;
  /// Inputs the layer takes: {min, max}; checked before build.
  virtual std::pair<std::size_t, std::size_t> input_count() const { return {1, 1}; }
  /// The shapes the first call builds from: the inputs' shapes by default. A layer that also takes an input
  /// by keyword (MultiHeadAttention's `key`) adds its shape, as Keras builds from every tensor argument.
  virtual std::vector<Shape> build_shapes_for(const std::vector<Tensor>& inputs, const CallArgs& args) const;

  /// Creates the weight `name` of `shape`, filled from `initializer` with the fans of `shape`, and returns
  /// its id. Only in the constructor or build(); later throws LayerStateError. A name the layer already
  /// uses throws ConfigError, an unknown dimension ShapeError.
  WeightId add_weight(const std::string& name, const Shape& shape, const Initializer& initializer,
                      bool trainable = true);
  /// add_weight() with the initializer's `fans` given, for a weight whose fans are not its shape's (the
  /// kernels of attention).
  WeightId add_weight(const std::string& name, const Shape& shape, const Initializer& initializer, const Fans& fans,
                      bool trainable = true);
  /// How a weight made of parts gets its values (LSTM's bias with unit_forget_bias): an array of `shape` and
  /// `dtype` drawn from `rng`, the weight's own stream.
  using WeightFill = std::function<Array(const Shape& shape, DType dtype, Rng& rng)>;
  /// add_weight() whose values come from `fill` instead of one initializer; initialize_weights() draws them
  /// again the same way.
  WeightId add_weight(const std::string& name, const Shape& shape, WeightFill fill, bool trainable = true);
  /// A non-trainable int8 weight of zeros (a quantized kernel), whatever the layer's dtype.
  WeightId add_int8_weight(const std::string& name, const Shape& shape);
  /// Gives one of the layer's own weights a regularizer (added to the training loss while the weight
  /// trains) and a constraint (applied after each optimizer update), as Keras's add_weight takes them.
  void regularize(WeightId weight, const Regularizer& regularizer, const Constraint& constraint = {});
  /// regularize() with the pair a config gave.
  void regularize(WeightId weight, const WeightRegularization& regularization) {
    regularize(weight, regularization.regularizer, regularization.constraint);
  }
  /// The activity regularizer: its penalty on each output of every call, divided by the output's batch size,
  /// joins the training loss (Keras's activity_regularizer, a base argument of every layer).
  const Regularizer& activity_regularizer() const { return activity_regularizer_; }
  /// Replaces the activity regularizer (ActivityRegularization sets its own from l1 and l2).
  void set_activity_regularizer(const Regularizer& regularizer) { activity_regularizer_ = regularizer; }
  /// Tracks a child layer (its weights become this layer's); unnamed children get unique names among
  /// their siblings. Returns the child. Models track their member layers with `part_of_this` false:
  /// those keep their own names, dtypes and random streams, and may be added after build.
  template <class L>
  std::shared_ptr<L> track(std::shared_ptr<L> child) {
    track_layer(child);
    return child;
  }
  /// track() for a LayerPtr. Throws ValueError for an empty pointer, ConfigError for the layer itself or a
  /// name a child already has, LayerStateError for a part tracked after build.
  void track_layer(const LayerPtr& child, bool part_of_this = true);
  /// Forgets every tracked child, so their weights are no longer this layer's (models re-tracking members).
  void clear_tracked_layers();

  /// The graph variable of a weight, in the graph of `like` (created on first use in that graph).
  Tensor variable(WeightId weight, const Tensor& like) const;
  /// Records `regularizer`'s penalty on `output`, divided by its batch size (axis 0) as Keras 3 divides
  /// activity penalties, as a loss of the output's graph that training adds (Graph::add_loss).
  void add_activity_loss(const Regularizer& regularizer, const Tensor& output) const;
  /// Records that each training step assigns `value` to the weight (moving statistics): Graph::add_state_update
  /// on the weight's variable in `value`'s graph. Call it from call() in training mode only.
  void add_update(WeightId weight, const Tensor& value) const;
  /// The array of one of the layer's own weights, outside any graph.
  const Array& weight_value(WeightId weight) const;

  /// ShapeError naming this layer: "<describe()>: <what> (a=(None, 3), b=(4,))".
  [[noreturn]] void shape_error(const std::string& what,
                                const std::vector<std::pair<std::string, Shape>>& shapes) const;
  /// ConfigError naming this layer: "<describe()>: <what>".
  [[noreturn]] void config_error(const std::string& what) const;

 private:
  struct OwnWeight {
    std::string name;
    Array value;
    Initializer initializer;
    Fans fans;
    WeightFill fill;  ///< when set, the values' source instead of initializer
    bool trainable;
    Regularizer regularizer;
    Constraint constraint;
  };
  void collect_weights(const std::string& prefix, bool frozen_by_parent, std::vector<Weight>& out) const;
  void initialize_own_weights(std::uint64_t seed);
  Array draw(const OwnWeight& weight, Rng& rng) const;  ///< the weight's values from its initializer or fill
  bool holds_first_draw() const;                        ///< every weight, children's too, equals its draw for seed 0
  void adopt(Layer& child) const;
  void apply_policy(const Config& dtype);  ///< a dtype name, DTypePolicy or quantized policy, checked
  void resolve_policy_map();               ///< the map's policy for path(), once
  void check_call(const std::vector<Tensor>& inputs, const CallArgs& args) const;
  void check_input_count(std::size_t count) const;
  void assign_name(Graph& graph);

  std::string class_name_;
  std::string name_;
  bool name_given_ = false;
  bool trainable_ = true;
  Regularizer activity_regularizer_;
  DType dtype_ = DType::float32;
  bool dtype_given_ = false;
  std::string policy_name_;  ///< "bfloat16" or "mixed_bfloat16"; empty for the float dtypes' own policies
  bool dtype_from_global_ = false;  ///< the dtype is the global policy's (a parent adopting the layer overrides it)
  bool policy_kept_ = false;        ///< keep_own_policy(): adopt leaves the policy as it is
  std::string quantization_mode_;
  std::vector<std::string> quantization_modes_;  ///< the modes this layer runs
  Config policy_map_;                            ///< a Keras DTypePolicyMap given as (or inherited for) the dtype
  bool policy_map_resolved_ = false;
  bool policy_map_given_ = false;  ///< the map came in this layer's own config (and goes back in get_config)
  bool built_ = false;
  bool building_ = false;
  mutable bool warned_about_mask_ = false;
  std::vector<Shape> build_shapes_;
  std::vector<Shape> output_shapes_;
  std::vector<OwnWeight> weights_;
  std::vector<LayerPtr> children_;
  std::vector<bool> child_is_part_;
  /// The key of this layer's random streams: its name, under its parent's ("mh_attention/query").
  std::string seed_path_;
};

// ---- handles ----------------------------------------------------------------------------------------

/// A copyable handle to a shared layer of type L, with the layer's common methods. Built-in layers have
/// handle classes with typed constructors (kiln::Dense); for a layer of your own, LayerHandle<MyLayer>
/// forwards its constructor arguments.
template <class L>
class LayerHandle {
 public:
  static_assert(std::is_base_of_v<Layer, L>, "LayerHandle holds a kiln::Layer");

  /// Makes a new layer, L(args...): LayerHandle<MyLayer>(config).
  template <class... Args, class = std::enable_if_t<std::is_constructible_v<L, Args&&...>>>
  explicit LayerHandle(Args&&... args) : layer_(std::make_shared<L>(std::forward<Args>(args)...)) {}
  /// Shares an existing layer.
  LayerHandle(std::shared_ptr<L> layer) : layer_(std::move(layer)) {}

  /// Calls the layer on `inputs` (Layer::operator()).
  Outputs operator()(const std::vector<Tensor>& inputs, const CallArgs& args = {}) const {
    return (*layer_)(inputs, args);
  }
  /// Calls the layer on one input (Layer::operator()).
  Tensor operator()(const Tensor& input, const CallArgs& args = {}) const { return (*layer_)(input, args); }

  /// The layer, for its own methods: dense->units().
  L* operator->() const { return layer_.get(); }
  /// The layer.
  L& operator*() const { return *layer_; }
  /// The shared pointer to the layer.
  const std::shared_ptr<L>& ptr() const { return layer_; }
  /// The layer as a LayerPtr.
  operator LayerPtr() const { return layer_; }

  /// The layer's name (Layer::name()).
  const std::string& name() const { return layer_->name(); }
  /// The layer's config (Layer::get_config()).
  Config get_config() const { return layer_->get_config(); }
  /// Whether the layer is built (Layer::built()).
  bool built() const { return layer_->built(); }
  /// Copies of the layer's weights (Layer::get_weights()).
  std::vector<Array> get_weights() const { return layer_->get_weights(); }
  /// Overwrites the layer's weights (Layer::set_weights()).
  void set_weights(const std::vector<Array>& values) const { layer_->set_weights(values); }
  /// The layer's number of scalars in weights (Layer::count_params()).
  std::int64_t count_params() const { return layer_->count_params(); }
  /// The layer's weights, sharing storage (Layer::weights()).
  std::vector<Weight> weights() const { return layer_->weights(); }
  /// The weights that train (Layer::trainable_weights()).
  std::vector<Weight> trainable_weights() const { return layer_->trainable_weights(); }
  /// The weights that do not train (Layer::non_trainable_weights()).
  std::vector<Weight> non_trainable_weights() const { return layer_->non_trainable_weights(); }
  /// Draws every weight again from its initializer, keyed by `seed` (Layer::initialize_weights()).
  void initialize_weights(std::uint64_t seed) const { layer_->initialize_weights(seed); }
  /// Whether the layer trains (Layer::trainable()).
  bool trainable() const { return layer_->trainable(); }
  /// Freezes (false) or unfreezes the layer and everything it holds, as Keras's `layer.trainable = False`
  /// (Layer::set_trainable()); compile a model again for fit() to see the change.
  void set_trainable(bool trainable) const { layer_->set_trainable(trainable); }
  /// Zeroes what stateful layers carry between batches (Layer::reset_state()).
  void reset_state() const { layer_->reset_state(); }

 protected:
  std::shared_ptr<L> layer_;  ///< the layer, shared by every copy of the handle
};

// ---- the registry ----------------------------------------------------------------------------------------

/// Makes a layer of one class from its config.
using LayerFactory = std::function<LayerPtr(const Config&)>;

/// A registered layer class: how to make one from its config, and its C++ type (for registered_name).
struct LayerClass {
  std::type_index type;  ///< the C++ class, by which registered_name() finds a layer's key
  LayerFactory create;   ///< makes one from its config
};

/// Every layer class by key ("kiln>Dense", "Custom>MHAttention", "acme>Gated"), with the lookup rules of
/// core/registry.hpp: a config's class_name "Dense" finds kiln>Dense.
Registry<LayerClass>& layer_registry();

/// Creates a registered layer from its config. Unknown names throw ConfigError with the nearest ones.
LayerPtr create_layer(const std::string& class_name, const Config& config = {});
/// From {"class_name": ..., "config": {...}, "registered_name": ..., "build_config": ...} as
/// serialize_layer writes it (and Keras does); with a build_config the layer is built at once.
LayerPtr layer_from_config(const Config& serialized);
/// {"class_name", "config", "registered_name", and "build_config" once built}: what layer_from_config
/// reads. ConfigError for a layer whose class nobody registered.
Config serialize_layer(const Layer& layer);

namespace detail {
template <class L>
bool register_layer(const std::string& key) {
  return layer_registry().add(key, LayerClass{std::type_index(typeid(L)), [](const Config& config) -> LayerPtr {
                                                return std::make_shared<L>(config);
                                              }});
}
}  // namespace detail

}  // namespace kiln

// Registers a layer class, constructible from a Config, under "Package>Name".
#define KILN_REGISTER_LAYER(key, Class) KILN_AT_STARTUP(::kiln::detail::register_layer<Class>(key))
