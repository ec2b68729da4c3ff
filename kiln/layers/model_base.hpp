#pragma once
// Models as layers: Input, the functional model and the sequential one. A model is a layer: it can be
// called on tensors, nested in another model, and saved by config. The handles users hold,
// kiln::Model and kiln::Sequential, add compile(), fit() and saving in models/model.hpp.
//
//   kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 8});
//   kiln::Tensor h = kiln::Dense(16, "relu")(x);
//   kiln::Model model(x, kiln::Dense(1)(h));
//   model.summary();
//   kiln::Array y = model.predict(data, /*batch_size=*/32);
//
// A model records the graph of layer calls from its inputs to its outputs (not the ops), so it can
// replay them in any graph: in the graph that fit() trains, in the graph predict() runs, or inside
// another model.
#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Input: a placeholder of a given shape (batch dimension first, usually unknown).
class InputLayer final : public Layer {
 public:
  /// Config keys (Keras names): batch_shape, the shape with its batch dimension first, or shape, without it
  /// (then batch_size, null for unknown, comes first); dtype; name. sparse, ragged and optional must be false.
  /// An integer or bool dtype ("int32": Keras's token ids) is held as float32, exact up to 2^24, and written
  /// back as declared. The layer is built at once. Throws ConfigError when neither shape is given, or on an
  /// unknown key.
  explicit InputLayer(const Config& config);
  const Shape& batch_shape() const { return batch_shape_; }  ///< the input's shape, batch dimension first
  Config get_config() const override;
  /// A placeholder for this input in `graph`, recorded as this layer's output.
  Tensor placeholder_in(Graph& graph);
  /// A placeholder in a new graph that this layer keeps alive: what kiln::Input returns.
  Tensor make_input();

 private:
  Shape batch_shape_;
  std::string integer_dtype_;                   ///< the integer dtype the config declared ("int32"), or ""
  std::vector<std::shared_ptr<Graph>> graphs_;  ///< made by make_input; the tensors it returned point into them
};

/// A symbolic model input. `shape` includes the batch dimension: {Shape::unknown, 8} is Keras's
/// Input(shape=(8,)). Each call makes a fresh graph; layers called on inputs of different graphs bring
/// them together, so several inputs just work.
Tensor Input(const Shape& shape, DType dtype = DType::float32, const std::string& name = "");

/// What every model shares: the recorded calls, summary, predict.
class ModelBase : public Layer {
 public:
  /// One output of one recorded node: output number `output` of nodes()[node].
  struct TensorRef {
    int node = 0;    ///< an index into nodes()
    int output = 0;  ///< an index into that node's outputs
  };
  /// One recorded layer call; inputs refer to earlier nodes' outputs. A model input is a node too: its
  /// InputLayer, with no inputs.
  struct Node {
    LayerPtr layer;                                              ///< the layer called
    std::vector<TensorRef> inputs;                               ///< the call's positional inputs
    std::vector<std::pair<std::string, TensorRef>> tensor_args;  ///< the call's named tensors (masks)
    Config options;                                              ///< the call's options: a map, or null
    std::vector<Shape> output_shapes;                            ///< the shapes of the call's outputs
  };

  std::size_t num_inputs() const { return input_nodes_.size(); }  ///< how many inputs the model takes
  std::size_t num_outputs() const { return outputs_.size(); }     ///< how many outputs predict returns
  /// The recorded calls: the input nodes first, in input order, then each call after the nodes it reads.
  const std::vector<Node>& nodes() const { return nodes_; }
  /// The model's inputs: indices into nodes(), in input order.
  const std::vector<int>& input_nodes() const { return input_nodes_; }
  /// The model's outputs, in output order.
  const std::vector<TensorRef>& output_refs() const { return outputs_; }
  /// keras-hub's models are saved by their constructor's arguments, not as a graph: their Python module
  /// ("keras_hub.src.models.gpt2.gpt2_backbone"). "" for a model saved as its graph (Functional, Sequential).
  virtual std::string keras_module() const { return ""; }
  /// Member layers in call order (input layers first), each once.
  std::vector<LayerPtr> member_layers() const;
  /// The model's layers as Keras's model.layers lists them: a functional model's in call order (its input
  /// layers first; its keras.ops calls, OperationLayers, left out as Keras leaves them out), a Sequential's
  /// stack in order (no input layer), built or not.
  virtual std::vector<LayerPtr> ordered_layers() const;
  /// A model that can build from the first data it sees (an unbuilt Sequential, as in Keras): builds for
  /// those arrays (batch unknown) and returns true. Others return built().
  virtual bool build_from_data(const std::vector<Array>& inputs);
  /// True when the model is not built yet but build_from_data() will build it: an unbuilt Sequential. False
  /// for other models.
  virtual bool builds_from_data() const { return false; }
  LayerPtr get_layer(const std::string& name) const;  ///< ValueError naming the known layers
  /// Masks flow through a model as through its layers: its outputs keep the masks its layers gave them.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>&, const Tensor&) const override { return {}; }
  /// The inputs' shapes, batch dimension first, in input order.
  std::vector<Shape> input_shapes() const;
  /// The inputs' dtypes, in input order: what predict converts its arrays to.
  std::vector<DType> input_dtypes() const;
  /// The outputs' shapes as recorded, in output order.
  std::vector<Shape> model_output_shapes() const;

  /// The Keras-style table: layer (type), output shape, params (and connections for non-linear models).
  std::string summary_string() const;
  /// Writes summary_string() to `out`.
  void summary(std::ostream& out) const;
  void summary() const;  ///< to stdout

  /// Runs the model in inference mode on concrete data, in batches (of the inputs' batch size when the
  /// model fixes one: ValueError when the rows do not split into them). Arrays of another dtype are converted.
  /// Safe to call from several threads at once: each call runs a Program of its own over one shared
  /// inference graph (planned once per batch size and kept for the next caller), so calls run
  /// concurrently and give, bitwise, what a single-threaded call gives. While fit runs on another thread,
  /// predict is refused with LayerStateError (see use_for_inference).
  std::vector<Array> predict(const std::vector<Array>& inputs, std::int64_t batch_size = 32);
  /// The same for a model of one input and one output; a model with several outputs throws ValueError.
  Array predict(const Array& input, std::int64_t batch_size = 32);

  /// Keras's predict_on_batch: the model in inference mode on the rows of `inputs` as one batch (of the inputs'
  /// batch size when the model fixes one). Arrays of another dtype are converted. Thread-safe as predict is.
  std::vector<Array> predict_on_batch(const std::vector<Array>& inputs);
  /// The same for a model of one input and one output; a model with several outputs throws ValueError.
  Array predict_on_batch(const Array& input);
  /// The same, written into the caller's arrays, one per output, each of that output's shape for these rows and
  /// of its dtype (ShapeError, DTypeError otherwise, before the model runs where the model fixes the dimension,
  /// and before any array is written): a deployed model's call. Once these input shapes have been planned (by
  /// an earlier call; with N threads calling at once, by N such calls at once), a call with inputs of the
  /// model's dtypes allocates nothing.
  void predict_on_batch(const std::vector<Array>& inputs, std::vector<Array>& outputs);
  /// The same for a model of one input and one output.
  void predict_on_batch(const Array& input, Array& output);

  /// Replays the model's calls in the graph of `inputs` (which may differ from the one it was made in).
  /// Replays on several threads take turns.
  std::vector<Tensor> apply(const std::vector<Tensor>& inputs, bool training) const;
  /// Keras's keras.Model(model.inputs, model.get_layer(name).output): a functional model from this model's
  /// inputs to the outputs of the (last) call of its layer `layer_name`, sharing this model's layers and
  /// weights; a loaded keras.applications model without its top is model.up_to("avg_pool"). ValueError
  /// naming the known layers when there is no such layer.
  std::shared_ptr<ModelBase> up_to(const std::string& layer_name) const;

  /// Who uses the model now. Any number of inference calls (predict, evaluate, test_on_batch) may run at
  /// once on any threads; a training call (fit, train_on_batch, compile) takes the model alone, though its
  /// own thread may still run inference (a callback's predict). The combinations that would race are
  /// refused with LayerStateError naming the model and `what`: inference while another thread trains,
  /// training while another thread runs inference or trains. A Use lasts until it is destroyed.
  class Use {
   public:
    /// Takes over `other`'s claim; `other` then releases nothing.
    Use(Use&& other) noexcept : model_(other.model_), training_(other.training_) { other.model_ = nullptr; }
    Use& operator=(Use&&) = delete;
    ~Use();

   private:
    friend class ModelBase;
    Use(const ModelBase* model, bool training) : model_(model), training_(training) {}
    const ModelBase* model_;
    bool training_;
  };
  /// Claims the model for inference (predict, evaluate, test_on_batch) until the Use is destroyed. Throws
  /// LayerStateError when another thread is training it. A model that carries_state() is claimed as for
  /// training: each call writes its states.
  Use use_for_inference(const char* what) const;
  /// Claims the model for training (fit, train_on_batch, compile) until the Use is destroyed. Throws
  /// LayerStateError when another thread is training it or running inference on it.
  Use use_for_training(const char* what) const;

  /// What a room above keeps on the model, one object of each type, so every handle to the model sees it:
  /// train/'s Trainer, what compile() made (reached as train/trainer.hpp's trainer_of). Null when none is
  /// attached. The type T is only ever named by the room that defines it: layers/ never looks inside.
  template <class T>
  std::shared_ptr<T> attachment() const {
    const auto found = attachments_.find(std::type_index(typeid(T)));
    return found == attachments_.end() ? nullptr : std::static_pointer_cast<T>(found->second);
  }
  /// Attaches `value` as the model's T, replacing any earlier one; null removes it.
  template <class T>
  void attach(std::shared_ptr<T> value) {
    if (value) attachments_[std::type_index(typeid(T))] = std::move(value);
    else attachments_.erase(std::type_index(typeid(T)));
  }

  /// Named things that travel with the model but are not layers (a tokenizer's vocabulary): kiln files save
  /// and load them; setting a name again replaces it.
  void set_asset(const std::string& name, const Config& value) { assets_[name] = value; }
  /// The asset `name`, or nullptr.
  const Config* asset(const std::string& name) const {
    const auto found = assets_.find(name);
    return found == assets_.end() ? nullptr : &found->second;
  }
  /// Every asset by name.
  const std::map<std::string, Config>& assets() const { return assets_; }

  /// ConfigError when the model calls a layer that also belongs to another of its layers (a sublayer
  /// called on its own): a config lists each layer with its own sublayers, so a file could not say they
  /// are one. Every writer of a model's config checks it first.
  void check_members_are_separate() const;

 protected:
  /// Reads the base fields (name, trainable, dtype) from `config`; `class_name` is the Keras class name
  /// ("Functional", "Sequential"). The model records nothing until record().
  ModelBase(const Config& config, std::string class_name);
  /// A model called as a layer: replays its calls on `inputs` (see apply()), training when `args` says so.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override;
  std::vector<std::string> call_argument_names() const override { return {}; }
  /// Records the calls between `inputs` and `outputs` (tensors made by layers).
  void record(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
  /// Forgets the recorded calls, inputs and outputs, and the inference graph that predict made from them.
  void clear_record();
  /// Layers and connections as Keras's functional config: "layers" (with "inbound_nodes"),
  /// "input_layers", "output_layers".
  Config graph_config() const;
  /// The inverse of graph_config(): creates every layer from its config and replays the connections.
  void restore_graph(const Config& config);
  bool linear() const;  ///< every layer takes exactly the previous layer's output

  std::vector<Node> nodes_;         ///< the recorded calls, as nodes() returns them
  std::vector<int> input_nodes_;    ///< the model's inputs: indices into nodes_, in input order
  std::vector<TensorRef> outputs_;  ///< the model's outputs, in order

 private:
  struct Inference;
  struct Usage;
  std::shared_ptr<Inference> inference();  ///< the inference graph and its programs, made on first use
  void check_inputs(const Array* given, std::size_t count, const std::vector<Tensor>& placeholders, const char* what,
                    bool rows_free) const;
  std::vector<Array> converted_inputs(const Array* given, std::size_t count,
                                      const std::vector<Tensor>& placeholders) const;
  void predict_batch(const Array* given, std::size_t count, Array* outputs, std::size_t output_count, bool into);
  void check_stackable(const std::vector<Tensor>& outputs, std::int64_t fixed_batch) const;
  std::shared_ptr<Inference> inference_;  ///< under inference_mutex_
  std::mutex inference_mutex_;
  mutable std::mutex apply_mutex_;
  // Replays nodes_[0..last] on `inputs` (apply_mutex_ held), every node's outputs by node.
  std::vector<std::vector<Tensor>> replay(const std::vector<Tensor>& inputs, bool training, std::size_t last) const;
  std::shared_ptr<Usage> usage_;
  std::map<std::type_index, std::shared_ptr<void>> attachments_;  ///< by the attached object's type
  std::map<std::string, Config> assets_;
};

/// Model(inputs, outputs): the functional API.
class FunctionalModel : public ModelBase {
 public:
  explicit FunctionalModel(const Config& config);  ///< from_config
  /// Records every layer call from `inputs` (kiln::Input tensors) to `outputs`, and builds the model.
  /// Automatic layer names that clash are renamed ("dense_1"). Throws ValueError when an output depends on a
  /// model input not among `inputs` or on a tensor no layer made, ConfigError when two layers were given one
  /// name.
  FunctionalModel(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const std::string& name = "");
  Config get_config() const override;
};

/// A stack of layers, each taking the previous one's output. Built from an Input (or build_for), or
/// lazily from the first call; those two leave the batch dimension unknown (an InputLayer keeps its own).
class SequentialModel : public ModelBase {
 public:
  /// Config keys, besides the base ones: layers (serialized layers, as get_config() writes them; an
  /// InputLayer may come first) and build_input_shape (then the model is built for it). An empty config
  /// makes an empty stack. Throws ConfigError on an unknown key.
  explicit SequentialModel(const Config& config = {});
  /// Appends `layer` to the stack; an InputLayer only as the first layer, and it builds the model. A built
  /// model is rebuilt with the new layer; when the layer does not fit, it is not kept and the error is
  /// rethrown. Throws ConfigError when the layer is already in the stack.
  void add(const LayerPtr& layer);
  /// Starts the stack from an input, as keras.Sequential([keras.Input(shape), ...]) does: a kiln::Input
  /// tensor, or the input's shape with the batch (Shape{None, 8}). Only before any layer.
  void add_input(const Tensor& input);
  /// The input's shape, batch dimension first: an InputLayer of that shape and the model's dtype. A shape of
  /// rank 0 throws ConfigError.
  void add_input(const Shape& input_shape);
  /// Removes the last layer of the stack (never the InputLayer); a built model is rebuilt without it.
  /// Throws ConfigError on an empty stack.
  void pop();
  const std::vector<LayerPtr>& stack() const { return stack_; }  ///< the layers added, in order, no InputLayer
  std::vector<LayerPtr> ordered_layers() const override { return stack_; }
  bool build_from_data(const std::vector<Array>& inputs) override;
  /// True until built: an unbuilt Sequential builds from the first data fit or predict give it.
  bool builds_from_data() const override { return !built(); }
  Config get_config() const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;

 private:
  void rebuild(const Shape& input_shape);  ///< records the stack again, from a fresh input
  std::vector<LayerPtr> stack_;
  LayerPtr input_layer_;  ///< an InputLayer given as the first layer
};

// ---- handles ------------------------------------------------------------------------------------------

/// A handle to a model of type M (a ModelBase): the methods of any layer handle, plus summary, predict and
/// the layers. kiln::Model and kiln::Sequential build on it.
template <class M>
class ModelHandle : public LayerHandle<M> {
 public:
  using LayerHandle<M>::LayerHandle;
  /// The model itself, so a handle goes wherever a model is taken (kiln::generate, kiln::plot_model, a
  /// lookup's or tokenizer's attach and of, save_model).
  operator M&() const { return *this->layer_; }  // NOLINT: implicit, the handle stands for its model
  void summary() const { this->layer_->summary(); }                      ///< prints the summary table to stdout
  void summary(std::ostream& out) const { this->layer_->summary(out); }  ///< writes the summary table to `out`
  /// The Keras-style summary table: each layer (type), output shape, params, then the totals.
  std::string summary_string() const { return this->layer_->summary_string(); }
  /// Runs the model in inference mode on the rows of `input`, `batch_size` rows at a time (ModelBase::predict).
  Array predict(const Array& input, std::int64_t batch_size = 32) const {
    return this->layer_->predict(input, batch_size);
  }
  /// The same for a model of several inputs or outputs: one array per input, one per output.
  std::vector<Array> predict(const std::vector<Array>& inputs, std::int64_t batch_size = 32) const {
    return this->layer_->predict(inputs, batch_size);
  }
  /// Keras's predict_on_batch: the rows of `input` as one batch (ModelBase::predict_on_batch).
  Array predict_on_batch(const Array& input) const { return this->layer_->predict_on_batch(input); }
  /// The same with several inputs or outputs.
  std::vector<Array> predict_on_batch(const std::vector<Array>& inputs) const {
    return this->layer_->predict_on_batch(inputs);
  }
  /// The same, written into `output` (the output's shape for these rows, and its dtype): once these input
  /// shapes are planned (by an earlier call), a call allocates nothing. A deployed model's call.
  void predict_on_batch(const Array& input, Array& output) const { this->layer_->predict_on_batch(input, output); }
  /// The same with several inputs or outputs.
  void predict_on_batch(const std::vector<Array>& inputs, std::vector<Array>& outputs) const {
    this->layer_->predict_on_batch(inputs, outputs);
  }
  /// The member layer named `name`; ValueError naming the known layers when there is none.
  LayerPtr get_layer(const std::string& name) const { return this->layer_->get_layer(name); }
  /// Keras's model.layers: a functional model's layers in call order (input layers first), a Sequential's
  /// stack in order.
  std::vector<LayerPtr> layers() const { return this->layer_->ordered_layers(); }
};

// kiln::Model and kiln::Sequential, the handles with compile(), fit() and saving, are in models/model.hpp.

}  // namespace kiln
