#pragma once
// The benchmark's real architectures in kiln: torchvision's ResNet-50 and MobileNetV2, as bench/torch_bench.cpp
// builds them in libtorch (torchvision/models/resnet.py and mobilenetv2.py), in Keras's layers and
// channels_last. Convolutions have no bias and are each followed by BatchNormalization with torch's epsilon
// 1e-5 and momentum 0.1 (Keras's 0.9); ResNet-50 is v1.5 (the stride on a bottleneck's 3x3 convolution);
// MobileNetV2 has width 1.0 and ReLU6. A convolution of size k pads (k - 1) / 2 zeros on every side as torch
// does: "same" at stride 1, ZeroPadding2D then "valid" when strided (where "same" would pad only after).
// Layers are made in the order torch registers its modules, so torch_bench --check can copy weights across.
// Inputs are 224x224x3; outputs 1000 logits.
#include <cstdint>

#include <kiln/kiln.hpp>

namespace bench {

inline kiln::Tensor conv_bn(const kiln::Tensor& x, std::int64_t filters, std::int64_t size, std::int64_t stride,
                            const char* activation, bool depthwise = false) {
  kiln::Tensor h = x;
  const bool pad = size > 1 && stride > 1;
  if (pad) h = kiln::ZeroPadding2D((size - 1) / 2)(h);
  const kiln::Config options{
      {"strides", stride}, {"padding", size == 1 || pad ? "valid" : "same"}, {"use_bias", false}};
  h = depthwise ? kiln::DepthwiseConv2D(size, "", options)(h) : kiln::Conv2D(filters, size, "", options)(h);
  h = kiln::BatchNormalization(-1, {{"epsilon", 1e-5}, {"momentum", 0.9}})(h);
  return activation[0] != '\0' ? kiln::Activation(activation)(h) : h;
}

inline kiln::Tensor bottleneck(const kiln::Tensor& x, std::int64_t width, std::int64_t stride, bool project) {
  kiln::Tensor h = conv_bn(x, width, 1, 1, "relu");
  h = conv_bn(h, width, 3, stride, "relu");
  h = conv_bn(h, 4 * width, 1, 1, "");
  const kiln::Tensor shortcut = project ? conv_bn(x, 4 * width, 1, stride, "") : x;
  return kiln::Activation("relu")(kiln::Add()({h, shortcut}));
}

inline kiln::Model resnet50() {
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 224, 224, 3}, kiln::DType::float32, "x");
  kiln::Tensor h = conv_bn(x, 64, 7, 2, "relu");
  h = kiln::MaxPooling2D(3, {{"strides", 2}})(kiln::ZeroPadding2D(1)(h));  // relu's zeros pad as torch's -inf would
  const std::int64_t blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage)
    for (std::int64_t block = 0; block < blocks[stage]; ++block)
      h = bottleneck(h, 64 << stage, block == 0 && stage > 0 ? 2 : 1, block == 0);
  h = kiln::GlobalAveragePooling2D()(h);
  return kiln::Model(x, kiln::Dense(1000)(h), "resnet50");
}

inline kiln::Model mobilenet_v2() {
  const kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 224, 224, 3}, kiln::DType::float32, "x");
  kiln::Tensor h = conv_bn(x, 32, 3, 2, "relu6");
  std::int64_t channels = 32;
  // torchvision's inverted residual settings: expansion t, output channels c, repeats n, first stride s.
  const std::int64_t settings[][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                      {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  for (const auto& [t, c, n, s] : settings)
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t stride = i == 0 ? s : 1;
      kiln::Tensor b = t != 1 ? conv_bn(h, channels * t, 1, 1, "relu6") : h;
      b = conv_bn(b, channels * t, 3, stride, "relu6", /*depthwise=*/true);
      b = conv_bn(b, c, 1, 1, "");
      h = stride == 1 && channels == c ? kiln::Add()({h, b}) : b;
      channels = c;
    }
  h = kiln::GlobalAveragePooling2D()(conv_bn(h, 1280, 1, 1, "relu6"));
  return kiln::Model(x, kiln::Dense(1000)(kiln::Dropout(0.2)(h)), "mobilenet_v2");
}

}  // namespace bench
