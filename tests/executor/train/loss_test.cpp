#include "executor/train/loss.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "schema/error.h"
#include "tests/executor/train/error_of.h"

namespace mfsdp::executor {
namespace {

using mfsdp::testing::error_of;

namespace F = torch::nn::functional;

DataConfig file_data(const std::string& kind, const std::string& path) {
  DataConfig config;
  config.kind = kind;
  config.path = path;
  return config;
}

DataConfig synthetic_data(uint64_t seed = 0) {
  DataConfig config;
  config.seed = seed;
  return config;
}

Batch batch_of(at::Tensor input, at::Tensor target, int64_t first_id = 0) {
  const int64_t n = input.size(0);
  return {std::move(input), std::move(target), at::arange(first_id, first_id + n, at::kLong)};
}

double value(const at::Tensor& t) {
  return t.item<double>();
}

TEST(LossKind, ParsesTheThreeNames) {
  EXPECT_EQ(parse_loss("cross_entropy"), LossKind::kCrossEntropy);
  EXPECT_EQ(parse_loss("mse"), LossKind::kMse);
  EXPECT_EQ(parse_loss("model"), LossKind::kModel);
  EXPECT_EQ(loss_name(LossKind::kMse), "mse");
  const Error e = error_of([] { parse_loss("nll"); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(), "unknown --loss 'nll'; choose cross_entropy, mse or model");
}

TEST(CrossEntropy, MatchesHandComputedValue) {
  const double log3 = std::log(3.0);
  const at::Tensor logits = torch::tensor({{0.0, log3}, {log3, 0.0}}, at::kFloat);
  const Batch b = batch_of(torch::zeros({2, 1}), torch::tensor({1, 1}, at::kLong));
  const Loss loss(LossKind::kCrossEntropy, file_data("tensors", "cls.pt"));
  // softmax gives p(1) = 3/4 for the first row and 1/4 for the second.
  EXPECT_NEAR(value(loss.compute(logits, b)), -(std::log(0.75) + std::log(0.25)) / 2, 1e-6);
}

TEST(CrossEntropy, LanguageModelAveragesOverEveryToken) {
  const at::Tensor logits = torch::randn({2, 3, 5}, at::kFloat);
  const at::Tensor target = torch::tensor({{0, 4, 2}, {1, 1, 3}}, at::kLong);
  const Batch b = batch_of(torch::zeros({2, 3}, at::kLong), target);
  const Loss loss(LossKind::kCrossEntropy, file_data("text", "corpus.txt"));
  EXPECT_EQ(loss.forward_inputs(b).size(), 1u);
  EXPECT_TRUE(loss.forward_inputs(b)[0].toTensor().equal(b.input));
  const at::Tensor l = loss.compute(logits, b);
  EXPECT_EQ(l.dim(), 0);
  EXPECT_NEAR(value(l), value(F::cross_entropy(logits.reshape({6, 5}), target.reshape({6}))), 1e-6);
}

// Equal-size microbatches: the mean of their losses is the loss of the whole batch, which is
// what the executor's average over ranks relies on.
TEST(CrossEntropy, MeanOfEqualMicrobatchesIsTheGlobalMean) {
  const at::Tensor logits = torch::randn({4, 3, 7}, at::kFloat);
  const at::Tensor target = torch::randint(7, {4, 3}, at::kLong);
  const Loss loss(LossKind::kCrossEntropy, synthetic_data());
  const double whole = value(loss.compute(logits, batch_of(torch::zeros({4, 3}), target)));
  const double halves =
      (value(loss.compute(logits.narrow(0, 0, 2),
                          batch_of(torch::zeros({2, 3}), target.narrow(0, 0, 2)))) +
       value(loss.compute(logits.narrow(0, 2, 2),
                          batch_of(torch::zeros({2, 3}), target.narrow(0, 2, 2), 2)))) /
      2;
  EXPECT_NEAR(whole, halves, 1e-6);
}

TEST(CrossEntropy, SyntheticClassifierUsesSampleIdModuloClasses) {
  const at::Tensor logits = torch::randn({4, 3}, at::kFloat);
  const Batch b = batch_of(torch::randn({4, 8}), at::Tensor(), 7);  // ids 7..10
  const Loss loss(LossKind::kCrossEntropy, synthetic_data());
  EXPECT_NEAR(value(loss.compute(logits, b)),
              value(F::cross_entropy(logits, torch::tensor({1, 2, 0, 1}, at::kLong))), 1e-6);
}

TEST(CrossEntropy, SyntheticTokensIntoAClassifierAlsoUseSampleIds) {
  const at::Tensor logits = torch::randn({2, 4}, at::kFloat);
  const Batch b = batch_of(torch::zeros({2, 8}, at::kLong), torch::zeros({2, 8}, at::kLong), 5);
  const Loss loss(LossKind::kCrossEntropy, synthetic_data());
  EXPECT_NEAR(value(loss.compute(logits, b)),
              value(F::cross_entropy(logits, torch::tensor({1, 2}, at::kLong))), 1e-6);
}

TEST(CrossEntropy, ComputesBFloat16LogitsInFloat32) {
  const at::Tensor logits = torch::randn({3, 4, 11}).to(at::kBFloat16);
  const at::Tensor target = torch::randint(11, {3, 4}, at::kLong);
  const Loss loss(LossKind::kCrossEntropy, file_data("tokens", "train.bin"));
  const at::Tensor l = loss.compute(logits, batch_of(torch::zeros({3, 4}, at::kLong), target));
  EXPECT_EQ(l.scalar_type(), at::kFloat);
  EXPECT_NEAR(
      value(l),
      value(F::cross_entropy(logits.to(at::kFloat).reshape({12, 11}), target.reshape({12}))), 1e-6);
}

TEST(CrossEntropy, TargetOutsideTheLogitsIsAnError) {
  at::Tensor target = torch::full({2, 4}, 3, at::kLong);
  target[1][2] = 12;
  const Loss loss(LossKind::kCrossEntropy, file_data("tokens", "train.bin"));
  const Error e = error_of([&] {
    loss.compute(torch::zeros({2, 4, 10}), batch_of(torch::zeros({2, 4}, at::kLong), target));
  });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "--loss cross_entropy: target id 12 of train.bin is outside the 10 classes of the "
               "logits [2, 4, 10]; ids must be below the model's output size (check --vocab-size "
               "and the data)");
}

TEST(CrossEntropy, RejectsMissingFloatAndMisshapenTargets) {
  const Loss loss(LossKind::kCrossEntropy, file_data("tensors", "x.pt"));
  const at::Tensor logits = torch::zeros({2, 5});
  Error e = error_of([&] { loss.compute(logits, batch_of(torch::zeros({2, 3}), at::Tensor())); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "--loss cross_entropy needs class ids, but x.pt has no targets; save "
               "(inputs, targets) or use --loss model");
  e = error_of([&] { loss.compute(logits, batch_of(torch::zeros({2, 3}), torch::zeros({2}))); });
  EXPECT_STREQ(e.what(),
               "--loss cross_entropy needs integer class ids, but the targets of x.pt "
               "are [2] Float; use --loss mse");
  e = error_of([&] {
    loss.compute(logits, batch_of(torch::zeros({2, 3}), torch::zeros({2, 3}, at::kLong)));
  });
  EXPECT_STREQ(e.what(),
               "--loss cross_entropy: targets [2, 3] of x.pt do not match logits [2, 5] "
               "(one class id per logit vector: the logits' shape without the last "
               "dim); check --seq-len and the model's output");
  e = error_of([&] {
    loss.compute(c10::ivalue::Tuple::create({logits}),
                 batch_of(torch::zeros({2, 3}), torch::zeros({2}, at::kLong)));
  });
  EXPECT_STREQ(e.what(),
               "--loss cross_entropy needs forward to return one tensor, but it "
               "returned a Tuple; return the output tensor, or the loss with --loss "
               "model");
}

TEST(Mse, MatchesHandComputedValue) {
  const Loss loss(LossKind::kMse, file_data("tensors", "reg.pt"));
  const at::Tensor out = torch::tensor({{1.0f, 2.0f}, {3.0f, 4.0f}});
  EXPECT_NEAR(value(loss.compute(out, batch_of(torch::zeros({2, 1}), torch::zeros({2, 2})))),
              (1.0 + 4.0 + 9.0 + 16.0) / 4, 1e-6);
  EXPECT_NEAR(value(loss.compute(out, batch_of(torch::zeros({2, 1}), out + 2))), 4.0, 1e-6);
}

TEST(Mse, ShapesMustMatch) {
  const Loss loss(LossKind::kMse, file_data("tensors", "reg.pt"));
  const Error e = error_of([&] {
    loss.compute(torch::zeros({4, 10}), batch_of(torch::zeros({4, 2}), torch::zeros({4, 1})));
  });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "--loss mse: the output [4, 10] and the target [4, 1] of reg.pt differ "
               "in shape; they must be equal");
}

TEST(Mse, TokenTargetsPointAtCrossEntropy) {
  const Loss loss(LossKind::kMse, file_data("text", "corpus.txt"));
  const Error e = error_of([&] {
    loss.compute(torch::zeros({2, 6}),
                 batch_of(torch::zeros({2, 6}, at::kLong), torch::zeros({2, 6}, at::kLong)));
  });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "--loss mse needs floating targets, but the targets of corpus.txt are "
               "[2, 6] Long; use --loss cross_entropy for class or token ids");
}

TEST(Mse, SyntheticTargetsAreStandardNormalPerSampleId) {
  const Loss loss(LossKind::kMse, synthetic_data(3));
  const at::Tensor zeros = torch::zeros({512, 8});
  const Batch b = batch_of(torch::randn({512, 4}), at::Tensor());
  // Against a zero output the loss is the mean square of the targets: about 1 for N(0, 1).
  EXPECT_NEAR(value(loss.compute(zeros, b)), 1.0, 0.05);
  // A pure function of (seed, id): the same ids in two halves give the same mean.
  const double halves =
      (value(loss.compute(zeros.narrow(0, 0, 256), batch_of(zeros.narrow(0, 0, 256), {}, 0))) +
       value(loss.compute(zeros.narrow(0, 0, 256), batch_of(zeros.narrow(0, 0, 256), {}, 256)))) /
      2;
  EXPECT_NEAR(value(loss.compute(zeros, b)), halves, 1e-5);
  EXPECT_NE(value(loss.compute(zeros, b)),
            value(Loss(LossKind::kMse, synthetic_data(4)).compute(zeros, b)));
  EXPECT_NE(value(loss.compute(zeros.narrow(0, 0, 4), batch_of(zeros.narrow(0, 0, 4), {}, 0))),
            value(loss.compute(zeros.narrow(0, 0, 4), batch_of(zeros.narrow(0, 0, 4), {}, 4))));
}

TEST(ModelLoss, ForwardGetsInputAndTarget) {
  const Loss loss(LossKind::kModel, file_data("text", "corpus.txt"));
  const Batch b = batch_of(torch::zeros({2, 6}, at::kLong), torch::ones({2, 6}, at::kLong));
  const std::vector<c10::IValue> inputs = loss.forward_inputs(b);
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_TRUE(inputs[0].toTensor().equal(b.input));
  EXPECT_TRUE(inputs[1].toTensor().equal(b.target));
  EXPECT_EQ(loss.forward_inputs(batch_of(torch::zeros({2, 3}), at::Tensor())).size(), 1u);
}

TEST(ModelLoss, ReturnsTheModelsScalar) {
  const Loss loss(LossKind::kModel, synthetic_data());
  const Batch b = batch_of(torch::zeros({2, 3}), at::Tensor());
  EXPECT_EQ(value(loss.compute(torch::tensor(2.5f), b)), 2.5);
  const at::Tensor l = loss.compute(torch::tensor({1.5f}).to(at::kBFloat16), b);
  EXPECT_EQ(l.dim(), 0);
  EXPECT_EQ(l.scalar_type(), at::kFloat);
  EXPECT_EQ(value(l), 1.5);
}

TEST(ModelLoss, NonScalarOutputIsAnErrorNamingIt) {
  const Loss loss(LossKind::kModel, synthetic_data());
  const Batch b = batch_of(torch::zeros({4, 3}), at::Tensor());
  Error e = error_of([&] { loss.compute(torch::zeros({4, 10}), b); });
  EXPECT_EQ(e.code(), ExitCode::kUsage);
  EXPECT_STREQ(e.what(),
               "--loss model needs forward(input, target) to return the loss as a "
               "floating scalar tensor, but it returned a tensor [4, 10] Float; return "
               "the mean loss, or use --loss cross_entropy or mse");
  e = error_of([&] { loss.compute(c10::ivalue::Tuple::create({torch::tensor(1.0f)}), b); });
  EXPECT_NE(std::string(e.what()).find("but it returned a Tuple;"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace mfsdp::executor
