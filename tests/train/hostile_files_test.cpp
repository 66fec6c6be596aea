// safetensors, model and checkpoint files as a careless or hostile user gives them: not regular
// files, headers nested deep enough to overflow a recursive printer, megabyte values, numbers out
// of range. Each gets a clear frugal::Error naming the file (and the tensor and field if any).
#include <gtest/gtest.h>

#include <filesystem>

#include "common/fifo_writer.h"
#include "file_test_util.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"

using namespace frugal;
using frugal::test::error_of;
using frugal::test::expect_mentions;
using frugal::test::ScratchFile;

namespace {

std::string load_error(const std::string& bytes) {
  ScratchFile f("hostile");
  test::write_bytes(f.path(), bytes);
  std::string msg = error_of([&] { train::load_safetensors(f.path()); });
  expect_mentions(msg, {f.path()});
  return msg;
}

}  // namespace

TEST(SafetensorsHostile, DirectoryIsRefusedNotReadAsAHeaderLength) {
  ScratchFile f("dir");
  std::filesystem::create_directory(f.path());
  std::string msg = error_of([&] { train::load_safetensors(f.path()); });
  std::filesystem::remove(f.path());
  expect_mentions(msg, {f.path(), "is a directory, not a regular file"});
  EXPECT_EQ(msg.find("header length"), std::string::npos) << msg;
}

TEST(SafetensorsHostile, DevicesAndFifosAreRefusedUpFront) {
  expect_mentions(error_of([] { train::load_safetensors("/dev/null"); }),
                  {"'/dev/null'", "is a character device, not a regular file"});
  ScratchFile f("fifo");
  test::FifoWriter fifo(f.path(), test::safetensors_bytes("{}", ""));
  expect_mentions(error_of([&] { train::load_safetensors(fifo.path()); }),
                  {f.path(), "is a FIFO (named pipe), not a regular file"});
}

TEST(SafetensorsHostile, DeeplyNestedHeaderIsRefusedWithoutRecursing) {
  // A million nested arrays as a shape: printing it recursively in a message overflowed the stack.
  // The 31st bracket is the 33rd level (the root object and the entry are the first two).
  const size_t depth = 1'000'000;
  std::string json = R"({"w":{"dtype":"F32","shape":)" + std::string(depth, '[') +
                     std::string(depth, ']') + R"(,"data_offsets":[0,4]}})";
  const size_t first_bracket = json.find('[');
  expect_mentions(
      load_error(test::safetensors_bytes(json, test::f32_bytes({1}))),
      {"nests deeper than 32 levels", "byte offset " + std::to_string(8 + first_bracket + 30)});
  // A string holding brackets is no nesting.
  std::string quoted = R"({"__metadata__":{"note":")" + std::string(100, '[') + R"("}})";
  ScratchFile q("quoted");
  test::write_bytes(q.path(), test::safetensors_bytes(quoted, ""));
  EXPECT_NO_THROW(train::load_safetensors(q.path()));
}

TEST(SafetensorsHostile, MessagesQuoteValuesBriefly) {
  std::string dtype(1'000'000, 'x');
  std::string json = R"({"w":{"dtype":")" + dtype + R"(","shape":[1],"data_offsets":[0,4]}})";
  std::string msg = load_error(test::safetensors_bytes(json, test::f32_bytes({1})));
  expect_mentions(msg, {"tensor 'w'", "unknown dtype \"xxxx", "..."});
  EXPECT_LT(msg.size(), 1000u);
}

TEST(SafetensorsHostile, NumbersOutOfRangeNameTheTensorAndField) {
  for (const char* field : {"shape", "data_offsets"}) {
    std::string value = std::string(field) == "shape" ? "[1e400]" : "[0,1e400]";
    std::string json =
        R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
        R"("w":{"dtype":"F32",")" +
        std::string(field) + "\":" + value +
        (std::string(field) == "shape" ? R"(,"data_offsets":[0,4]}})" : R"(,"shape":[1]}})");
    expect_mentions(load_error(test::safetensors_bytes(json, std::string(5, '\1'))),
                    {"tensor 'w'", std::string("field '") + field + "'", "1e400"});
  }
  std::string dtype = R"({"w":{"dtype":-1e999,"shape":[1],"data_offsets":[0,4]}})";
  expect_mentions(load_error(test::safetensors_bytes(dtype, test::f32_bytes({1}))),
                  {"tensor 'w'", "field 'dtype'"});
  // Integers past 2^64 parse as floating point: not an extent.
  std::string big = R"({"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})";
  expect_mentions(load_error(test::safetensors_bytes(big, test::f32_bytes({1}))),
                  {"tensor 'w'", "bad extent"});
}

TEST(SafetensorsHostile, EmptyShapeWhoseStridesOverflowIsRefused) {
  // Zero elements, zero bytes, but the stride of the first axis would be 2^62 * 2^62.
  std::string json = R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],)"
                     R"("data_offsets":[0,0]}})";
  expect_mentions(load_error(test::safetensors_bytes(json, "")),
                  {"tensor 'w'", "spans more than 2^63 elements"});
}

TEST(CheckpointHostile, DirectoryOrFifoAsACheckpointIsNamed) {
  nn::Linear model(3, 2);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  ScratchFile f("dir");
  std::filesystem::create_directory(f.path());
  std::string msg = error_of([&] { train::load_checkpoint(f.path(), model, &opt); });
  std::filesystem::remove(f.path());
  expect_mentions(msg, {f.path(), "is a directory, not a regular file"});
  test::FifoWriter fifo(f.path(), test::safetensors_bytes("{}", ""));
  expect_mentions(error_of([&] { train::load_model(fifo.path(), model); }),
                  {f.path(), "is a FIFO (named pipe), not a regular file"});
}
