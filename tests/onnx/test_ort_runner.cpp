// ort_run on a hand-built model (y = Relu(x) + 1, x: [N, 3] with a dynamic N): exact values for
// both optimization levels and batch sizes that do and do not divide N; ORT's errors and the
// argument errors come back as qat::Error.
#include <onnx/onnx_pb.h>

#include <boost/test/unit_test.hpp>
#include <fstream>

#include "common/errors.h"
#include "io/io_test_util.h"
#include "onnx/ort_runner.h"
#include "onnx/ort_precondition.h"

using namespace qat;
using test::error_of;
using test::ort_run;
using test::TempDir;

namespace {

void set_shape(onnx::ValueInfoProto* v, const std::string& name, const std::string& batch_dim,
               std::int64_t cols) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param(batch_dim);
  t->mutable_shape()->add_dim()->set_dim_value(cols);
}

// y = Relu(x) + 1 (opset 13), x and y of shape [N, 3]; a second output r = Relu(x) if asked.
std::string relu_plus_one(bool two_outputs = false) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("qat test_ort_runner");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  auto* g = model.mutable_graph();
  g->set_name("relu_plus_one");
  auto* one = g->add_initializer();
  one->set_name("one");
  one->set_data_type(onnx::TensorProto::FLOAT);
  one->add_float_data(1.0f);  // rank 0
  auto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->add_input("x");
  relu->add_output("r");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("r");
  add->add_input("one");
  add->add_output("y");
  set_shape(g->add_input(), "x", "N", 3);
  set_shape(g->add_output(), "y", "N", 3);
  if (two_outputs) set_shape(g->add_output(), "r", "N", 3);
  std::string bytes;
  BOOST_REQUIRE(model.SerializeToString(&bytes));
  return bytes;
}

std::string save(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  test::write_file(path, bytes);
  return path;
}

// x[i] = (i - 10) / 4 for i < rows * 3: negatives, zero and positives, exact in float.
Tensor ramp(std::int64_t rows) {
  std::vector<float> v(static_cast<std::size_t>(rows * 3));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<float>(i) - 10.0f) / 4.0f;
  return Tensor::from_vector(v, {rows, 3});
}

std::vector<float> relu_plus_one_ref(const Tensor& x) {
  std::vector<float> y = x.to_vector<float>();
  for (float& v : y) v = std::max(v, 0.0f) + 1.0f;
  return y;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ort_runner)

BOOST_AUTO_TEST_CASE(exact_values_every_level_and_batch,
                     *boost::unit_test::precondition(test::OrtAvailable())) {
  TempDir dir;
  const std::string model = save(dir, "m.onnx", relu_plus_one());
  const Tensor x = ramp(7);
  const std::vector<float> want = relu_plus_one_ref(x);
  BOOST_TEST(want[0] == 1.0f);  // the ramp reaches both sides of the kink
  BOOST_TEST(want.back() == 3.5f);
  for (const std::string level : {"all", "disabled"}) {
    for (std::int64_t batch : {0, 1, 3, 7, 10}) {
      BOOST_TEST_CONTEXT("optimization " << level << ", batch " << batch) {
        const Tensor y = ort_run(model, x, level, batch);
        BOOST_TEST(y.dtype() == DType::Float32);
        BOOST_TEST(y.shape() == (Shape{7, 3}));
        BOOST_TEST(y.to_vector<float>() == want, boost::test_tools::per_element());
      }
    }
  }
  // many batches, the last one short (1000 = 15 * 64 + 40)
  const Tensor big = ramp(1000);
  const Tensor y = ort_run(model, big, "all", 64);
  BOOST_TEST(y.shape() == (Shape{1000, 3}));
  BOOST_TEST(y.to_vector<float>() == relu_plus_one_ref(big), boost::test_tools::per_element());
  BOOST_TEST(dir.entries() == std::vector<std::string>{"m.onnx"});  // ort_run left nothing here
}

BOOST_AUTO_TEST_CASE(input_rows_view, *boost::unit_test::precondition(test::OrtAvailable())) {
  // a view at an offset into shared storage is sent as its own rows
  TempDir dir;
  const std::string model = save(dir, "m.onnx", relu_plus_one());
  const Tensor x = ramp(7);
  const Tensor y = ort_run(model, x.rows(2, 5), "disabled", 2);
  BOOST_TEST(y.shape() == (Shape{3, 3}));
  BOOST_TEST(y.to_vector<float>() == relu_plus_one_ref(x.rows(2, 5)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ort_errors, *boost::unit_test::precondition(test::OrtAvailable())) {
  TempDir dir;
  const Tensor x = ramp(4);
  const std::string corrupt = save(dir, "corrupt.onnx", "this is not a protobuf");
  const std::string e = error_of([&] { ort_run(corrupt, x); });
  BOOST_TEST_MESSAGE("corrupt model: " << e);
  BOOST_TEST(e.rfind("ort_run: " + corrupt + ": ", 0) == 0, e);
  BOOST_TEST(e.find("Protobuf parsing failed") != std::string::npos, e);

  const std::string missing = dir.file("missing.onnx");
  const std::string m = error_of([&] { ort_run(missing, x); });
  BOOST_TEST(m.rfind("ort_run: " + missing + ": ", 0) == 0, m);
  BOOST_TEST(m.find("missing.onnx") != m.rfind("missing.onnx"), m);  // ORT names the file too

  const std::string two = save(dir, "two.onnx", relu_plus_one(true));
  const std::string t = error_of([&] { ort_run(two, x); });
  BOOST_TEST(t == "ort_run: " + two + ": run_ort.js: " + two +
                      ": expected 1 input and 1 output, model has inputs [x] and outputs [y,r]");

  // the model wants [N, 3]: ORT's shape check comes back
  const std::string model = save(dir, "m.onnx", relu_plus_one());
  const std::string s = error_of([&] { ort_run(model, Tensor::zeros({4, 2})); });
  BOOST_TEST_MESSAGE("wrong shape: " << s);
  BOOST_TEST(s.rfind("ort_run: " + model + ": ", 0) == 0, s);
  BOOST_TEST(s.find("index: 1 Got: 2 Expected: 3") != std::string::npos, s);
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"corrupt.onnx", "m.onnx", "two.onnx"}));
}

BOOST_AUTO_TEST_CASE(argument_errors) {
  // checked before ONNX Runtime is looked for
  const Tensor x = ramp(2);
  BOOST_TEST(error_of([&] { ort_run("m.onnx", x, "fast"); }) ==
             "ort_run: optimization must be \"all\" or \"disabled\", got \"fast\"");
  BOOST_TEST(error_of([&] { ort_run("m.onnx", x, "all", -1); }) ==
             "ort_run: batch must be >= 0, got -1");
  BOOST_TEST(error_of([&] { ort_run("m.onnx", Tensor::scalar(1.0), "all", 2); }) ==
             "ort_run: batch 2 needs an input of rank >= 1, got []");
  BOOST_TEST(error_of([&] {
               ort_run("m.onnx", Tensor::zeros({2, 3}, DType::Int8));
             }).find("ort_run") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
