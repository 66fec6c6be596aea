// IDX files as a careless or hostile user gives them: headers whose size product overflows, gzip
// bombs, files that are not regular files, an empty data set. Each gets a clear frugal::Error
// naming the file, and none is read past what its header declares.
#include <gtest/gtest.h>

#include "base/error.h"
#include "common/error_of.h"
#include "common/fifo_writer.h"
#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data_test_util.h"

using namespace frugal;
using namespace frugal::data;
using namespace frugal::data::testing;
using frugal::test::error_of;

namespace {

void expect_mentions(const std::string& msg, const std::vector<std::string>& pieces) {
  for (const std::string& p : pieces) {
    EXPECT_NE(msg.find(p), std::string::npos) << "message lacks \"" << p << "\": " << msg;
  }
}

}  // namespace

TEST(IdxHostile, SizeProductThatOverflowsIsRefusedFromTheHeader) {
  TempDir dir;
  // 2^30 * 2^30 * 16 = 2^64 wraps to 0 in 64 bits: a header-only file would pass a length check.
  for (const char* name : {"wrap.raw", "wrap.gz"}) {
    std::vector<uint8_t> header = idx_images_bytes(1u << 30, 1u << 30, 16, {});
    write_file(dir.file(name), std::string(name).ends_with(".gz") ? gzip(header) : header);
    expect_mentions(error_of([&] { read_idx_images(dir.file(name)); }),
                    {name, "1073741824 x 1073741824 x 16", "declare more bytes than any file"});
  }
  // The in-memory parser checks the same product.
  std::vector<uint8_t> largest = idx_images_bytes(0x7fffffff, 0x7fffffff, 0x7fffffff, {});
  expect_mentions(error_of([&] { parse_idx_images("mem", largest); }), {"mem", "declare more"});
}

TEST(IdxHostile, GzipBombStopsAtTheDeclaredSize) {
  TempDir dir;
  // 8 declared labels, then 64 MiB of zeros: 64 copies of a 1 MiB member of about 1 KiB.
  std::vector<uint8_t> bomb = gzip(idx_labels_bytes(8, std::vector<uint8_t>(8, 1)));
  std::vector<uint8_t> zeros = gzip(std::vector<uint8_t>(size_t{1} << 20, 0));
  for (int i = 0; i < 64; ++i) bomb.insert(bomb.end(), zeros.begin(), zeros.end());
  std::string p = dir.file("labels.gz");
  write_file(p, bomb);
  // Reading stops one byte past the declared 16 (it does not count the 64 MiB that follow).
  expect_mentions(error_of([&] { read_idx_labels(p); }),
                  {"labels.gz", "trailing garbage", "runs on past byte 16"});
  // A header declaring more than the compressed file can inflate to is refused before reading.
  std::string q = dir.file("images.gz");
  write_file(q, gzip(idx_images_bytes(1000000, 28, 28, {})));
  expect_mentions(error_of([&] { read_idx_images(q); }),
                  {"images.gz", "truncated", "declares 784000016 bytes", "inflates to at most"});
}

TEST(IdxHostile, RawFileWithExtraBytesNamesHowMany) {
  TempDir dir;
  std::string p = dir.file("labels.raw");
  write_file(p, idx_labels_bytes(3, {1, 2, 3, 4, 5}));
  expect_mentions(error_of([&] { read_idx_labels(p); }),
                  {"labels.raw", "trailing garbage: 2 extra bytes from byte 11 (file has 13)"});
}

TEST(IdxHostile, NonRegularFilesAreRefusedUpFront) {
  TempDir dir;
  expect_mentions(error_of([&] { read_idx_images(dir.path()); }),
                  {dir.path(), "is a directory, not a regular file"});
  // /dev/null stands for /dev/zero and other devices (the same check, without an endless read).
  expect_mentions(error_of([] { read_idx_labels("/dev/null"); }),
                  {"/dev/null", "is a character device, not a regular file"});
  std::vector<uint8_t> one_label = idx_labels_bytes(1, {3});
  test::FifoWriter fifo(dir.file("labels.fifo"), std::string(one_label.begin(), one_label.end()));
  expect_mentions(error_of([&] { read_idx_labels(fifo.path()); }),
                  {"labels.fifo", "is a FIFO (named pipe), not a regular file"});
}

TEST(IdxHostile, EmptyDataSetNamesTheFileAndTheCount) {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte.gz"), gzip(idx_images_bytes(0, 28, 28, {})));
  write_file(dir.file("train-labels-idx1-ubyte.gz"), gzip(idx_labels_bytes(0, {})));
  expect_mentions(error_of([&] { FashionMnist(dir.path(), true); }),
                  {"train-images-idx3-ubyte.gz", "0 images (count at byte 4)"});
}

// An image size of zero names the header field that is zero: rows at byte 8, columns at 12.
TEST(IdxHostile, AnEmptyImageSizeNamesTheZeroField) {
  expect_mentions(error_of([] { parse_idx_images("rows", idx_images_bytes(1, 0, 28, {})); }),
                  {"rows: empty image size 0x28", "at byte 8"});
  expect_mentions(error_of([] { parse_idx_images("cols", idx_images_bytes(1, 28, 0, {})); }),
                  {"cols: empty image size 28x0", "at byte 12"});
}
