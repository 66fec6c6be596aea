// IDX reading: good files (gzip'd and raw) read back byte for byte; every bad file is rejected
// with a message naming the file and the byte offset.
#include "data/idx.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "data/fashion_mnist.h"
#include "data_test_util.h"

using namespace frugal;
using namespace frugal::data;
using namespace frugal::data::testing;

namespace {

// Runs f, expects a frugal::Error whose message contains every piece.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : pieces) {
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks \"" << p << "\": " << msg;
    }
  }
}

}  // namespace

TEST(Idx, ReadsGzipAndRawImagesAndLabels) {
  TempDir dir;
  const uint32_t n = 7, rows = 5, cols = 3;
  std::vector<uint8_t> pixels = pattern_bytes(n * rows * cols, 1);
  std::vector<uint8_t> labels = {3, 1, 4, 1, 5, 9, 2};
  write_file(dir.file("img.gz"), gzip(idx_images_bytes(n, rows, cols, pixels)));
  write_file(dir.file("img.raw"), idx_images_bytes(n, rows, cols, pixels));
  write_file(dir.file("lab.gz"), gzip(idx_labels_bytes(n, labels)));
  for (const char* name : {"img.gz", "img.raw"}) {
    IdxImages im = read_idx_images(dir.file(name));
    EXPECT_EQ(im.count, n);
    EXPECT_EQ(im.rows, rows);
    EXPECT_EQ(im.cols, cols);
    EXPECT_EQ(im.pixels, pixels) << name;
  }
  IdxLabels lb = read_idx_labels(dir.file("lab.gz"));
  EXPECT_EQ(lb.count, n);
  EXPECT_EQ(lb.labels, labels);
}

TEST(Idx, ConcatenatedGzipMembersAreJoined) {
  TempDir dir;
  std::vector<uint8_t> raw = idx_labels_bytes(9, pattern_bytes(9, 2));
  std::vector<uint8_t> a(raw.begin(), raw.begin() + 5), b(raw.begin() + 5, raw.end());
  std::vector<uint8_t> gz = gzip(a), gz_b = gzip(b);
  gz.insert(gz.end(), gz_b.begin(), gz_b.end());
  write_file(dir.file("two.gz"), gz);
  EXPECT_EQ(read_idx_labels(dir.file("two.gz")).labels, pattern_bytes(9, 2));
}

TEST(Idx, WrongMagic) {
  TempDir dir;
  std::string p = dir.file("train-images-idx3-ubyte.gz");
  // A labels file where images are expected.
  write_file(p, gzip(idx_labels_bytes(3, {1, 2, 3})));
  expect_error([&] { read_idx_images(p); },
               {"train-images-idx3-ubyte.gz", "bad magic number 0x801 at byte 0", "0x803"});
  std::string q = dir.file("labels.gz");
  write_file(q, gzip(idx_images_bytes(1, 1, 1, {7})));
  expect_error([&] { read_idx_labels(q); }, {"labels.gz", "0x803 at byte 0"});
}

TEST(Idx, TruncatedHeader) {
  TempDir dir;
  std::string p = dir.file("images.gz");
  std::vector<uint8_t> full = idx_images_bytes(2, 2, 2, pattern_bytes(8, 3));
  write_file(p, gzip(std::vector<uint8_t>(full.begin(), full.begin() + 10)));
  expect_error([&] { read_idx_images(p); }, {"images.gz", "truncated at byte 10 of 16"});
  write_file(p, gzip(std::vector<uint8_t>(full.begin(), full.begin() + 2)));
  expect_error([&] { read_idx_images(p); }, {"images.gz", "truncated at byte 2 of 16"});
  std::string q = dir.file("labels.gz");
  write_file(q, gzip({0, 0, 8, 1, 0, 0}));
  expect_error([&] { read_idx_labels(q); }, {"labels.gz", "truncated at byte 6 of 8"});
}

TEST(Idx, TruncatedData) {
  TempDir dir;
  std::string p = dir.file("train-images-idx3-ubyte.gz");
  // 7 images of 5x3: 16 + 105 = 121 bytes expected, 100 present.
  std::vector<uint8_t> full = idx_images_bytes(7, 5, 3, pattern_bytes(105, 4));
  write_file(p, gzip(std::vector<uint8_t>(full.begin(), full.begin() + 100)));
  expect_error([&] { read_idx_images(p); },
               {"train-images-idx3-ubyte.gz: truncated at byte 100 of 121 expected"});
  std::string q = dir.file("labels.raw");
  write_file(q, idx_labels_bytes(11, pattern_bytes(4, 5)));
  expect_error([&] { read_idx_labels(q); }, {"labels.raw: truncated at byte 12 of 19 expected"});
}

TEST(Idx, TrailingBytes) {
  TempDir dir;
  std::string p = dir.file("images.gz");
  std::vector<uint8_t> bytes = idx_images_bytes(7, 5, 3, pattern_bytes(108, 6));  // 3 extra
  write_file(p, gzip(bytes));
  expect_error([&] { read_idx_images(p); },
               {"images.gz", "trailing garbage: the inflated data runs on past byte 121"});
  // Garbage after a complete gzip member (not another member).
  std::string q = dir.file("labels.gz");
  std::vector<uint8_t> gz = gzip(idx_labels_bytes(3, {1, 2, 3}));
  size_t member = gz.size();
  gz.insert(gz.end(), {0xde, 0xad, 0xbe, 0xef});
  write_file(q, gz);
  expect_error([&] { read_idx_labels(q); },
               {"labels.gz",
                "trailing garbage after gzip data at compressed byte " + std::to_string(member)});
}

TEST(Idx, CorruptGzip) {
  TempDir dir;
  std::string p = dir.file("images.gz");
  // A valid gzip header followed by bytes that are no deflate stream.
  std::vector<uint8_t> bad = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03};
  std::vector<uint8_t> junk = pattern_bytes(64, 7);
  junk[0] = 0xff;  // block type 3 (reserved) in the first deflate header bits
  bad.insert(bad.end(), junk.begin(), junk.end());
  write_file(p, bad);
  expect_error([&] { read_idx_images(p); },
               {"images.gz", "corrupt gzip", "compressed byte", "zlib: invalid block type"});
  // A gzip stream cut in half.
  std::vector<uint8_t> gz = gzip(idx_images_bytes(7, 5, 3, pattern_bytes(105, 8)));
  std::vector<uint8_t> half(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  write_file(p, half);
  expect_error([&] { read_idx_images(p); },
               {"images.gz", "unexpected end of compressed data at compressed byte " +
                                 std::to_string(half.size())});
  // A .gz name whose bytes are not gzip at all.
  write_file(p, pattern_bytes(40, 9));
  expect_error([&] { read_idx_images(p); },
               {"images.gz", "not a gzip stream at compressed byte 0"});
}

TEST(Idx, MissingFile) {
  TempDir dir;
  expect_error([&] { read_idx_images(dir.file("nope.gz")); }, {"nope.gz", "cannot open"});
}

TEST(FashionMnistFiles, ReadsFolderAndChecksCounts) {
  TempDir dir;
  const uint32_t n = 9, r = 4, c = 3;
  std::vector<uint8_t> pixels = pattern_bytes(n * r * c, 10);
  std::vector<uint8_t> labels = {0, 9, 3, 3, 7, 1, 2, 8, 5};
  write_file(dir.file("train-images-idx3-ubyte.gz"), gzip(idx_images_bytes(n, r, c, pixels)));
  write_file(dir.file("train-labels-idx1-ubyte.gz"), gzip(idx_labels_bytes(n, labels)));
  FashionMnist ds(dir.path(), true);
  ASSERT_EQ(ds.size(), n);
  EXPECT_EQ(ds.sample_shape(), (Shape{4, 3, 1}));
  EXPECT_EQ(ds.num_classes(), 10);
  std::vector<float> img(r * c);
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = -1;
    ds.get(i, img.data(), &label);
    EXPECT_EQ(label, labels[i]);
    for (uint32_t j = 0; j < r * c; ++j) {
      EXPECT_FLOAT_EQ(img[j], static_cast<float>(pixels[i * r * c + j] / 255.0));
    }
  }
  EXPECT_THROW(ds.get(n, img.data(), nullptr), Error);
  FashionMnist limited(dir.path(), true, 4);
  EXPECT_EQ(limited.size(), 4);

  // The test split is missing: the error names the file.
  expect_error([&] { FashionMnist t(dir.path(), false); }, {"t10k-images-idx3-ubyte"});
  // Count mismatch between images and labels: both files named.
  write_file(dir.file("t10k-images-idx3-ubyte.gz"), gzip(idx_images_bytes(n, r, c, pixels)));
  write_file(dir.file("t10k-labels-idx1-ubyte.gz"),
             gzip(idx_labels_bytes(n - 1, std::vector<uint8_t>(labels.begin(), labels.end() - 1))));
  expect_error(
      [&] { FashionMnist t(dir.path(), false); },
      {"t10k-images-idx3-ubyte.gz", "9 images", "t10k-labels-idx1-ubyte.gz", "8 labels", "byte 4"});
  // A label outside the 10 classes.
  labels[5] = 10;
  write_file(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(idx_labels_bytes(n, labels)));
  expect_error([&] { FashionMnist t(dir.path(), false); },
               {"t10k-labels-idx1-ubyte.gz", "label 10 at byte 13"});
}
