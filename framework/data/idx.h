#pragma once
// Readers for the IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
// a big-endian header (magic, counts) followed by the raw bytes. Files may be gzip-compressed
// or plain. Every error names the function, the file and what is wrong.
#include <string>

#include "framework/data/dataset.h"

namespace qat::data {

/// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// An IDX3 ubyte image file (magic 0x00000803) -> uint8 (N, rows, cols).
/// Throws if the file cannot be opened or read, the magic is wrong, or the data is truncated.
Tensor read_idx_images(const std::string& path);

/// An IDX1 ubyte label file (magic 0x00000801) -> uint8 (N). Throws as read_idx_images, and
/// if a label is not below `num_classes`.
Tensor read_idx_labels(const std::string& path, int num_classes = 256);

/// The images and labels of two IDX files; throws if their counts differ.
Dataset load_idx(const std::string& images_path, const std::string& labels_path, int num_classes);

/// Fashion-MNIST (Xiao et al. 2017) from {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz in
/// `dir`: 60000 training or 10000 test images of 28x28 pixels, 10 classes.
Dataset load_fashion_mnist(const std::string& dir = kFashionMnistDir, bool train = true);

}  // namespace qat::data
