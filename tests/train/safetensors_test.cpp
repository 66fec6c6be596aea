// safetensors files: bit-exact round trips of every dtype and shape, the reference's byte layout,
// and each kind of bad file rejected with the file, tensor and byte offset named.
#include "train/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/factory.h"
#include "file_test_util.h"

using namespace frugal;
using frugal::test::error_of;
using frugal::test::expect_mentions;
using frugal::test::ScratchFile;

namespace {

// A tensor whose bytes are random (any bit pattern: NaNs, infinities, subnormals included).
Tensor random_bits(const Shape& shape, DType dtype, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(shape, {.dtype = dtype});
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

// The load error for `bytes` written to a scratch file, checked to name the file and `parts`.
void expect_bad_file(const std::string& bytes, const std::vector<std::string>& parts) {
  ScratchFile f("bad");
  test::write_bytes(f.path(), bytes);
  std::string msg = error_of([&] { train::load_safetensors(f.path()); });
  expect_mentions(msg, {f.path()});
  expect_mentions(msg, parts);
}

}  // namespace

TEST(Safetensors, RoundTripEveryDTypeAndShapeBitExact) {
  std::mt19937_64 rng(7);
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i64, DType::u8};
  const Shape shapes[] = {Shape{},        Shape{0},    Shape{5},
                          Shape{3, 0, 2}, Shape{3, 7}, Shape{2, 3, 1, 5}};
  train::NamedTensors tensors;
  for (DType d : dtypes) {
    for (size_t s = 0; s < std::size(shapes); ++s) {
      tensors.emplace_back(std::string(dtype_name(d)) + "." + std::to_string(s),
                           random_bits(shapes[s], d, rng));
    }
  }
  train::Metadata md = {{"format", "pt"}, {"note", "quotes \" and \\ and \xc3\xa9"}};
  ScratchFile f("rt");
  train::save_safetensors(f.path(), tensors, md);
  EXPECT_FALSE(std::filesystem::exists(f.path() + ".tmp"));

  auto [loaded, loaded_md] = train::load_safetensors(f.path());
  EXPECT_EQ(loaded_md, md);
  ASSERT_EQ(loaded.size(), tensors.size());
  std::map<std::string, Tensor> by_name(loaded.begin(), loaded.end());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const Tensor& l = by_name[name];
    EXPECT_TRUE(l.device().is_cpu());
    EXPECT_EQ(l.dtype(), t.dtype()) << name;
    EXPECT_EQ(l.shape(), t.shape()) << name;
    EXPECT_EQ(test::tensor_bytes(l), test::tensor_bytes(t)) << name;
  }
}

TEST(Safetensors, LayoutMatchesTheReferenceWriter) {
  std::mt19937_64 rng(3);
  // A u8 tensor first: the writer must still place the wider ones first so all stay aligned.
  train::NamedTensors tensors = {{"mask", random_bits({3}, DType::u8, rng)},
                                 {"w", random_bits({2, 3}, DType::f32, rng)},
                                 {"h", random_bits({5}, DType::bf16, rng)},
                                 {"d", random_bits({1}, DType::f64, rng)}};
  ScratchFile f("layout");
  train::save_safetensors(f.path(), tensors);
  std::string bytes = test::read_bytes(f.path());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  std::string text = bytes.substr(8, n);
  EXPECT_EQ(text.find_last_not_of(' ') + 1 + (8 - (text.find_last_not_of(' ') + 1) % 8) % 8, n)
      << "padding is spaces only";
  auto header = nlohmann::json::parse(text);
  EXPECT_FALSE(header.contains("__metadata__"));  // no metadata given, none written
  uint64_t total = 0;
  for (const auto& [name, t] : tensors) {
    auto e = header.at(name);
    EXPECT_EQ(e.at("dtype").get<std::string>(), train::safetensors_dtype_name(t.dtype()));
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), t.shape().dims());
    auto off = e.at("data_offsets").get<std::vector<uint64_t>>();
    EXPECT_EQ(off[1] - off[0], t.nbytes());
    EXPECT_EQ(off[0] % dtype_size(t.dtype()), 0u) << name << " aligned";
    EXPECT_EQ(bytes.substr(8 + n + off[0], t.nbytes()), test::tensor_bytes(t)) << name;
    total += t.nbytes();
  }
  EXPECT_EQ(bytes.size(), 8 + n + total);
}

TEST(Safetensors, ReadsAHandWrittenFileInAnyHeaderOrder) {
  // Header keys listed against data order, as another writer may do; values known by hand.
  std::string json =
      R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
      R"("__metadata__":{"format":"pt"},"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})";
  int64_t a = -123456789012345;
  std::string data(reinterpret_cast<const char*>(&a), 8);
  data += test::f32_bytes({1.5f, -2.25f});
  ScratchFile f("hand");
  test::write_bytes(f.path(), test::safetensors_bytes(json, data));
  auto [t, md] = train::load_safetensors(f.path());
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].first, "a");  // data-section order
  EXPECT_EQ(t[0].second.shape(), Shape{});
  EXPECT_EQ(t[0].second.data<int64_t>()[0], a);
  EXPECT_EQ(t[1].first, "b");
  EXPECT_EQ(t[1].second.to_vector(), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(md.at("format"), "pt");
}

TEST(Safetensors, SaveReplacesAtomicallyAndRejectsBadInput) {
  ScratchFile f("atomic");
  train::save_safetensors(f.path(), {{"x", full({2}, 1.0)}});
  std::string before = test::read_bytes(f.path());
  std::string msg = error_of([&] {
    train::save_safetensors(f.path(), {{"x", full({2}, 2.0)}, {"x", full({2}, 3.0)}});
  });
  expect_mentions(msg, {f.path(), "'x'", "twice"});
  msg = error_of([&] { train::save_safetensors(f.path(), {{"__metadata__", full({1}, 1.0)}}); });
  expect_mentions(msg, {"__metadata__", "reserved"});
  msg = error_of([&] {
    train::save_safetensors(f.path(), {{"m", Tensor::empty({2}, {.device = Device::meta()})}});
  });
  expect_mentions(msg, {"'m'", "meta"});
  EXPECT_EQ(test::read_bytes(f.path()), before);  // the old file is intact
  EXPECT_FALSE(std::filesystem::exists(f.path() + ".tmp"));
  train::save_safetensors(f.path(), {{"y", full({3}, 4.0)}});
  EXPECT_EQ(train::load_safetensors(f.path()).tensors.at(0).first, "y");
}

// ---- bad files: each names the file, the tensor (when there is one) and the byte offset ----

TEST(SafetensorsBadFile, ShorterThanTheLengthField) {
  expect_bad_file(std::string("\x10\0\0\0\0", 5), {"5 bytes", "byte offset 0"});
}

TEST(SafetensorsBadFile, HeaderLengthPastTheEnd) {
  expect_bad_file(test::u64_le(64) + "{}      ",
                  {"header length 64", "16-byte file", "byte offset 0"});
}

TEST(SafetensorsBadFile, HeaderLengthOverTheLimit) {
  expect_bad_file(test::u64_le(200'000'000) + "{}      ",
                  {"header length 200000000", "100000000", "byte offset 0"});
}

TEST(SafetensorsBadFile, InvalidJson) {
  // The stray comma is the 23rd byte of the header: file offset 8 + 22.
  std::string json = R"({"a":{"dtype":"F32",  ,"shape":[1],"data_offsets":[0,4]}})";
  ASSERT_EQ(json.find(",  ,") + 3, 22u);
  expect_bad_file(test::safetensors_bytes(json, test::f32_bytes({1})),
                  {"not valid JSON", "byte offset 30"});
  expect_bad_file(test::safetensors_bytes("[1, 2]", ""), {"not a JSON object", "byte offset 8"});
}

TEST(SafetensorsBadFile, UnknownDType) {
  std::string json = R"({"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  expect_bad_file(test::safetensors_bytes(json, std::string(8, '\1')),
                  {"tensor 'ids'", "unknown dtype \"I32\"", "byte offset 9"});  // its key
}

TEST(SafetensorsBadFile, ShapeDoesNotMatchOffsets) {
  std::string json = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  expect_bad_file(test::safetensors_bytes(json, std::string(20, '\1')),
                  {"tensor 'w'", "hold 20 bytes", "[2, 3]", "needs 24", "byte offset 9"});
  std::string neg = R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})";
  expect_bad_file(test::safetensors_bytes(neg, std::string(8, '\1')),
                  {"tensor 'w'", "bad extent -2"});
  std::string huge =
      R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  expect_bad_file(test::safetensors_bytes(huge, ""), {"tensor 'w'", "over 2^64"});
}

TEST(SafetensorsBadFile, OffsetsReversed) {
  std::string json = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})";
  expect_bad_file(test::safetensors_bytes(json, std::string(8, '\1')),
                  {"tensor 'w'", "[8,0]", "end before they begin"});
}

TEST(SafetensorsBadFile, OverlappingTensors) {
  std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  std::string bytes = test::safetensors_bytes(json, std::string(12, '\1'));
  uint64_t data_start = bytes.size() - 12;
  expect_bad_file(
      bytes, {"tensor 'b'", "overlap tensor 'a'", "byte offset " + std::to_string(data_start + 4)});
}

TEST(SafetensorsBadFile, GapBetweenTensors) {
  std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  std::string bytes = test::safetensors_bytes(json, std::string(20, '\1'));
  uint64_t data_start = bytes.size() - 20;
  expect_bad_file(bytes, {"tensor 'b'", "gap of 4 bytes after tensor 'a'",
                          "byte offset " + std::to_string(data_start + 8)});
}

TEST(SafetensorsBadFile, TensorOutsideTheDataSection) {
  std::string json = R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  std::string bytes = test::safetensors_bytes(json, std::string(4, '\1'));
  uint64_t data_start = bytes.size() - 4;
  expect_bad_file(bytes, {"tensor 'a'", "outside the data section of 4 bytes",
                          "byte offset " + std::to_string(data_start)});
}

TEST(SafetensorsBadFile, DataSectionLongerThanTheTensors) {
  std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes = test::safetensors_bytes(json, std::string(11, '\1'));
  uint64_t data_start = bytes.size() - 11;
  expect_bad_file(bytes, {"data section is 11 bytes", "cover 8",
                          "byte offset " + std::to_string(data_start + 8)});
}

TEST(SafetensorsBadFile, DuplicateNameAndBadMetadata) {
  std::string dup = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                    R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_bad_file(test::safetensors_bytes(dup, "xy"), {"tensor 'a'", "appears twice"});
  std::string md = R"({"__metadata__":{"epoch":3}})";
  expect_bad_file(test::safetensors_bytes(md, ""), {"__metadata__", "'epoch'", "not a string"});
  std::string no_shape = R"({"a":{"dtype":"U8","data_offsets":[0,1]}})";
  expect_bad_file(test::safetensors_bytes(no_shape, "x"), {"tensor 'a'", "no 'shape'"});
}

// A field given twice inside one entry is refused: readers keeping the first or the last one
// would read two different files. The offset is the entry's key's.
TEST(SafetensorsBadFile, AFieldTwiceInOneEntry) {
  const std::string head = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)";
  std::string twice =
      head + R"("w":{"dtype":"F16","dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  const std::string at = "byte offset " + std::to_string(8 + head.size());
  expect_bad_file(test::safetensors_bytes(twice, "xabcd"),
                  {"tensor 'w'", "field 'dtype' appears twice", at});
}

// An error in an entry deep in the header points at that entry, not at the header's start.
TEST(SafetensorsBadFile, AnEntrysErrorGivesTheEntrysOffset) {
  const std::string head = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}, )";
  std::string bad = head + R"("b":{"dtype":"I32","shape":[1],"data_offsets":[1,5]}})";
  expect_bad_file(
      test::safetensors_bytes(bad, "xabcd"),
      {"tensor 'b'", "unknown dtype", "byte offset " + std::to_string(8 + head.size())});
  // A tensor named as a field is found as a key whose value is an entry, not as a's field.
  std::string named = head + R"("dtype":{"dtype":"I32","shape":[1],"data_offsets":[1,5]}})";
  expect_bad_file(test::safetensors_bytes(named, "xabcd"),
                  {"tensor 'dtype'", "byte offset " + std::to_string(8 + head.size())});
}

// A name of megabytes is cut short in the message, as values are.
TEST(SafetensorsBadFile, ALongNameIsCutShortInTheMessage) {
  const std::string name(1 << 20, 'n');
  std::string bad = R"({")" + name + R"(":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  ScratchFile f("bad");
  test::write_bytes(f.path(), test::safetensors_bytes(bad, "abcd"));
  const std::string msg = error_of([&] { train::load_safetensors(f.path()); });
  expect_mentions(msg, {"unknown dtype", "nnn..."});
  EXPECT_LT(msg.size(), 1000u);
}

// JSON text has no byte order mark; the reference reader refuses one, and so does frugal. Its
// "__metadata__": null is no metadata, and frugal reads it so.
TEST(SafetensorsBadFile, AByteOrderMarkIsRefusedAndNullMetadataIsNone) {
  expect_bad_file(test::safetensors_bytes("\xEF\xBB\xBF{}", ""),
                  {"byte order mark", "byte offset 8"});
  ScratchFile f("null_md");
  test::write_bytes(
      f.path(),
      test::safetensors_bytes(
          R"({"__metadata__":null,"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
  const train::SafetensorsFile file = train::load_safetensors(f.path());
  EXPECT_TRUE(file.metadata.empty());
  ASSERT_EQ(file.tensors.size(), 1u);
}

// Names and metadata go into a JSON header, which is UTF-8: other bytes are refused before
// anything is written, naming the file and the entry.
TEST(SafetensorsBadFile, SavingTextThatIsNotUtf8IsRefused) {
  ScratchFile f("not_utf8");
  std::string msg = error_of([&] {
    train::save_safetensors(f.path(), {{"w", zeros({1})}}, {{"note", "caf\xe9"}});
  });
  expect_mentions(msg, {f.path(), "__metadata__", "note", "not valid UTF-8"});
  msg = error_of([&] { train::save_safetensors(f.path(), {{"caf\xe9", zeros({1})}}); });
  expect_mentions(msg, {f.path(), "tensor name", "not valid UTF-8"});
  EXPECT_FALSE(std::filesystem::exists(f.path()));
}

TEST(SafetensorsBadFile, MissingFile) {
  std::string msg = error_of([] { train::load_safetensors("/nonexistent/dir/x.safetensors"); });
  expect_mentions(msg, {"/nonexistent/dir/x.safetensors", "cannot open"});
}
