#pragma once
// Moving layer-made tensors between graphs by replaying the layer calls that made them.
#include <kiln/core/tensor.hpp>

namespace kiln::detail {

// `tensor` itself when it already lives in `graph`; otherwise the same tensor rebuilt in `graph` by
// calling again, in `graph`, every layer on its path (kiln::Input placeholders are re-created). Throws
// ValueError if the path contains a tensor that no layer made (a raw op or a user's placeholder).
Tensor import_tensor(const Tensor& tensor, Graph& graph);

}  // namespace kiln::detail
