// The command line's parsing alone (tools/options.h): every numeric flag through one checked
// helper that names the flag and the bad text; sizes that would wrap, NaN, Inf and negative
// values refused; a missing CUDA device said plainly.
#include "tools/options.h"

#include <gtest/gtest.h>

#include "common/error_of.h"
#include "kernels/context.h"

using namespace frugal;
using namespace frugal::tools;
using frugal::test::error_of;

namespace {

// 'text' as the messages quote it.
std::string quoted(const std::string& text) { return std::string(1, '\'') + text + '\''; }

void expect_mentions(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " not in: " << msg;
}

// The train flags `flag value` alone must be refused with a message naming both.
void expect_train_refuses(const std::string& flag, const std::string& value) {
  expect_mentions(error_of<UsageError>([&] {
                    parse_train_options({"--" + flag, value});
                  }),
                  {"train: --" + flag, quoted(value)});
}

}  // namespace

TEST(ParseNumbers, IntegersMustBeWholeInRangeAndNotWrap) {
  EXPECT_EQ(parse_integer("c", "n", "42", 1, 100), 42);
  EXPECT_EQ(parse_integer("c", "n", "-1", -1, 100), -1);
  for (const char* bad :
       {"", "0", "101", "4x", " 4", "4 ", "+4", "1e2", "0x10", "4.0", "9223372036854775808",
        "-9223372036854775809", "99999999999999999999999"}) {
    expect_mentions(error_of<UsageError>([&] { parse_integer("c", "n", bad, 1, 100); }),
                    {"c: --n expects an integer from 1 to 100", quoted(bad)});
  }
}

TEST(ParseNumbers, NumbersMustBeFiniteAndInRange) {
  EXPECT_EQ(parse_number("c", "x", "0.5", 0, 1), 0.5);
  EXPECT_EQ(parse_number("c", "x", "1e-3", 0, 1), 1e-3);
  for (const char* bad :
       {"", "nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999", "-1", "1.5", "0.5x", "0,5"}) {
    expect_mentions(error_of<UsageError>([&] { parse_number("c", "x", bad, 0, 1); }),
                    {"c: --x expects a finite number", quoted(bad)});
  }
}

TEST(ParseNumbers, ByteSizesRefuseOverflowBeforeShifting) {
  EXPECT_EQ(parse_bytes("c", "memory-budget", "3GiB"), int64_t{3} << 30);
  EXPECT_EQ(parse_bytes("c", "memory-budget", "512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_bytes("c", "memory-budget", "1048576"), 1048576);
  EXPECT_EQ(parse_bytes("c", "memory-budget", "1048576GiB"), kMaxBytes);
  // 2^34 GiB shifts into the sign bit; 9e18 GiB wrapped to a small or negative number.
  for (const char* bad : {"17179869184GiB", "9000000000000000000GiB", "99999999999999999999",
                          "1048577GiB", "0", "0GiB", "GiB", "3 GiB", "3GB", "-3GiB", "3.5GiB"}) {
    expect_mentions(error_of<UsageError>([&] { parse_bytes("c", "memory-budget", bad); }),
                    {"c: --memory-budget", quoted(bad)});
  }
}

TEST(ParseNumbers, InputShapesAreBoundedAndWhole) {
  const InputShape s = parse_input_shape("c", "3x224x200");
  EXPECT_EQ(s.c, 3);
  EXPECT_EQ(s.h, 224);
  EXPECT_EQ(s.w, 200);
  // sscanf's %lld wrapped 18446744073709551617 to 1.
  for (const char* bad :
       {"3x18446744073709551617x1", "3x224", "3x224x224x", "3x224x224x1", "0x224x224", "-3x2x2",
        "3x65537x1", "4097x1x1", "3X224X224", "x1x1", "3x x1", ""}) {
    expect_mentions(error_of<UsageError>([&] { parse_input_shape("c", bad); }),
                    {"c: --input expects CxHxW", quoted(bad)});
  }
  // Each extent is fine, the batch of them is not.
  expect_mentions(error_of<UsageError>([] {
                    parse_compare_options({"--batch", "1048576", "--input", "4096x65536x65536"});
                  }),
                  {"compare: --batch 1048576", "4096x65536x65536"});
}

TEST(TrainOptions, EveryNumericFlagIsChecked) {
  const TrainOptions o = parse_train_options(
      {"--epochs", "3", "--batch=64", "--lr", "0.1", "--memory-budget", "3GiB", "--save", "c.st"});
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.batch, 64);
  EXPECT_EQ(o.lr, 0.1);
  EXPECT_EQ(*o.memory_budget, int64_t{3} << 30);
  EXPECT_EQ(o.save, "c.st");
  EXPECT_EQ(o.weight_decay, 4e-5);
  EXPECT_EQ(parse_train_options({"--optimizer", "adamw"}).weight_decay, 0.01);
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--lr", "nan"});
                  }),
                  {"train: --lr expects a finite number >= 0, got 'nan'"});

  expect_train_refuses("batch", "0");
  expect_train_refuses("batch", "99999999999999999999");
  expect_train_refuses("batch", "4294967297");
  expect_train_refuses("epochs", "0");
  expect_train_refuses("epochs", "9223372036854775807");
  expect_train_refuses("lr", "nan");  // was cast on to the optimizer as NaN
  expect_train_refuses("lr", "inf");
  expect_train_refuses("lr", "-0.1");
  expect_train_refuses("momentum", "1.5");
  expect_train_refuses("weight-decay", "nan");
  expect_train_refuses("warmup-epochs", "inf");  // was cast to INT64_MIN warm-up steps
  expect_train_refuses("warmup-epochs", "2");    // more than the 1 epoch
  expect_train_refuses("label-smoothing", "nan");
  expect_train_refuses("width", "0");
  expect_train_refuses("width", "nan");
  expect_train_refuses("image-size", "100000");
  expect_train_refuses("workers", "100000");
  expect_train_refuses("seed", "-1");
  expect_train_refuses("limit", "-2");
  expect_train_refuses("limit", "0");       // synthetic data took 0 as its default size
  expect_train_refuses("test-limit", "0");  // Fashion-MNIST then reported 0.00% accuracy
  expect_train_refuses("limit", "9223372036854775807");  // failed later, in the permutation
  EXPECT_EQ(parse_train_options({"--limit", "1073741824"}).data.limit, int64_t{1} << 30);
  expect_train_refuses("memory-budget", "17179869184GiB");
  expect_train_refuses("optimizer", "sgdd");
  expect_train_refuses("release", "threshold:nan");
  expect_train_refuses("device", "cuda:99999999999999999999");  // stoi threw out_of_range
  expect_train_refuses("device", "meta");
  expect_train_refuses("model", "resnet1000");
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--save", ""});
                  }),
                  {"--save needs a file name"});
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--graph", "--oom-recover"});
                  }),
                  {"--oom-recover"});
}

// Flags that would be accepted and then ignored are refused, naming the flag and why.
TEST(TrainOptions, FlagsThatWouldBeIgnoredAreRefused) {
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--optimizer", "adamw", "--momentum", "0.5"});
                  }),
                  {"train: --momentum is SGD's", "adamw"});
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--epochs", "3", "--warmup-epochs", "1"});
                  }),
                  {"train: --warmup-epochs", "--schedule none"});
  EXPECT_EQ(parse_train_options({"--epochs", "3", "--schedule", "cosine", "--warmup-epochs", "1"})
                .warmup_epochs,
            1.0);
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--data", "synthetic", "--data-dir", "d"});
                  }),
                  {"train: --data-dir is for fashion-mnist"});
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--data", "synthetic", "--no-augment"});
                  }),
                  {"train: --no-augment is for fashion-mnist"});
  expect_mentions(error_of<UsageError>([] {
                    parse_estimate_options({"--memory-budget", "1KiB"});
                  }),
                  {"estimate: --memory-budget bounds the batch", "add --max-batch"});
  expect_mentions(error_of<UsageError>([] {
                    parse_estimate_options({"--granularity", "8"});
                  }),
                  {"estimate: --granularity bounds the batch"});
  EXPECT_EQ(parse_estimate_options({"--max-batch", "--granularity", "8"}).granularity, 8);
}

// A valued flag followed by another flag has no value (as argparse says): taking the flag as the
// value wrote a loss log named --deterministic and left the run nondeterministic.
TEST(TrainOptions, AMissingValueIsNotTakenFromTheNextFlag) {
  expect_mentions(error_of<UsageError>([] {
                    parse_train_options({"--loss-log", "--deterministic"});
                  }),
                  {"train: --loss-log needs a value", "--deterministic", "--loss-log=VALUE"});
  expect_mentions(error_of<UsageError>([] { parse_train_options({"--save"}); }),
                  {"train: --save needs a value"});
  const TrainOptions o = parse_train_options({"--loss-log=--odd-name", "--deterministic"});
  EXPECT_EQ(o.loss_log, "--odd-name");
  EXPECT_TRUE(o.deterministic);
  EXPECT_FALSE(o.seed_given);
  EXPECT_TRUE(parse_train_options({"--seed", "0"}).seed_given);
}

TEST(EvalOptions, ReadsOnlyTheTestFiles) {
  const EvalOptions o = parse_eval_options({"--load", "m.safetensors", "--batch", "32"});
  EXPECT_FALSE(o.data.need_train);
  EXPECT_EQ(o.batch, 32);
  expect_mentions(error_of<UsageError>([] { parse_eval_options({}); }),
                  {"--load PATH is required"});
  expect_mentions(error_of<UsageError>([] {
                    parse_eval_options({"--load", "m", "--batch", "-5"});
                  }),
                  {"eval: --batch", "'-5'"});
}

TEST(OtherOptions, CompareEstimateAndSmiAreChecked) {
  expect_mentions(error_of<UsageError>([] {
                    parse_compare_options({"--steps", "nan"});
                  }),
                  {"compare: --steps", "'nan'"});
  expect_mentions(error_of<UsageError>([] {
                    parse_compare_options({"--device", "meta"});
                  }),
                  {"compare: --device", "'meta'"});
  expect_mentions(error_of<UsageError>([] {
                    parse_estimate_options({"--granularity", "0"});
                  }),
                  {"estimate: --granularity", "'0'"});
  expect_mentions(error_of<UsageError>([] {
                    parse_estimate_options({"--memory-budget", "99999999999GiB"});
                  }),
                  {"estimate: --memory-budget", "'99999999999GiB'"});
  // --max-batch predicts one CUDA device for every batch and way of training; flags it would
  // ignore (the JSON file it never wrote, --device cpu, --gpus) are refused.
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--json", "x.json"},
                                                {"--device", "cpu"},
                                                {"--gpus", "4"},
                                                {"--batch", "64"},
                                                {"--per-module"},
                                                {"--recompute-depthwise"}}) {
    std::vector<std::string> argv = {"--max-batch"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    expect_mentions(error_of<UsageError>([&] { parse_estimate_options(argv); }),
                    {"estimate: --max-batch", "leave out " + extra[0]});
  }
  EXPECT_TRUE(parse_estimate_options({"--max-batch", "--memory-budget", "2GiB"}).max_batch);
  expect_mentions(error_of<UsageError>([] {
                    parse_smi_options({"-l", "1e9"});
                  }),
                  {"smi: --loop", "'1e9'"});
  EXPECT_EQ(parse_smi_options({"-l", "2", "--count", "3"}).count, 3);
}

// Without a GPU (or past the last one) the message says so and how to pick the CPU, instead of a
// driver error code from the first allocation.
TEST(ResolveDevice, AMissingCudaDeviceIsSaidPlainly) {
  const int count = kernels::cuda_device_count();
  const std::string flag = "cuda:" + std::to_string(count);
  const std::string msg = error_of<UsageError>([&] { resolve_device("train", flag); });
  expect_mentions(msg, {"train: --device " + flag, "--device cpu"});
  if (count == 0) {
    expect_mentions(msg, {"no CUDA device is present"});
    expect_mentions(error_of<UsageError>([] { resolve_device("eval", "cuda"); }),
                    {"no CUDA device is present"});
    EXPECT_EQ(resolve_device("train", "auto"), Device::cpu());
  }
  EXPECT_EQ(resolve_device("train", "cpu"), Device::cpu());
}

namespace {

TEST(TrainOptions, DeterministicIsAFlagOfTrainAndCompare) {
  EXPECT_FALSE(parse_train_options({}).deterministic);
  EXPECT_TRUE(parse_train_options({"--deterministic"}).deterministic);
  EXPECT_FALSE(parse_compare_options({}).deterministic);
  EXPECT_TRUE(parse_compare_options({"--deterministic"}).deterministic);
  // a flag, not an option with a value
  EXPECT_THROW(parse_train_options({"--deterministic", "yes"}), UsageError);
}

}  // namespace

// A file or folder flag given empty ("--json=", an unset "$DIR") is refused naming it: it used
// to turn that output off, or (--data-dir) fall back to the system's data folder, unseen.
TEST(PathFlags, AnEmptyFileOrFolderIsRefusedNamingTheFlag) {
  for (const char* flag :
       {"save", "resume", "loss-log", "memory-log", "memory-svg", "memory-trace", "data-dir"}) {
    expect_mentions(
        error_of<UsageError>([&] { parse_train_options({std::string("--") + flag + "="}); }),
        {std::string("train: --") + flag + " needs a file name"});
  }
  for (const char* flag : {"load", "data-dir"}) {
    expect_mentions(error_of<UsageError>([&] {
                      parse_eval_options({"--load", "m.safetensors", std::string("--") + flag, ""});
                    }),
                    {std::string("eval: --") + flag + " needs a file name"});
  }
  for (const char* flag : {"json", "svg"}) {
    expect_mentions(
        error_of<UsageError>([&] { parse_compare_options({std::string("--") + flag + "="}); }),
        {std::string("compare: --") + flag + " needs a file name"});
  }
  expect_mentions(error_of<UsageError>([] { parse_estimate_options({"--json="}); }),
                  {"estimate: --json needs a file name"});
  EXPECT_EQ(parse_estimate_options({"--json", "e.json"}).json, "e.json");
  EXPECT_EQ(parse_train_options({}).loss_log, "");
}

// eval's --data synthetic makes its images: a --data-dir beside it would be ignored.
TEST(EvalOptions, SyntheticDataRefusesADataDir) {
  expect_mentions(
      error_of<UsageError>([] {
        parse_eval_options({"--load", "m.safetensors", "--data", "synthetic", "--data-dir", "/d"});
      }),
      {"eval: --data-dir is for fashion-mnist"});
  EXPECT_EQ(parse_eval_options({"--load", "m.safetensors", "--data-dir", "/d"}).data.dir, "/d");
}
