// Note [What eval takes from a checkpoint] in tools/trained_with.h.
#include "tools/trained_with.h"

#include <cstdio>

#include "tools/args.h"
#include "tools/options.h"

namespace frugal::tools {

namespace {
constexpr const char* kModel = "train.model";
constexpr const char* kWidth = "train.width";
constexpr const char* kImageSize = "train.image_size";
constexpr const char* kData = "train.data";
}  // namespace

train::Metadata TrainedWith::metadata() const {
  char width_text[32];
  std::snprintf(width_text, sizeof width_text, "%.17g", width);  // read back exactly
  return {{kModel, model},
          {kWidth, width_text},
          {kImageSize, std::to_string(image_size)},
          {kData, data}};
}

std::optional<TrainedWith> TrainedWith::from(const train::Metadata& metadata,
                                             const std::string& path) {
  auto get = [&](const char* key) -> const std::string* {
    auto it = metadata.find(key);
    return it == metadata.end() ? nullptr : &it->second;
  };
  const std::string *model = get(kModel), *width = get(kWidth), *size = get(kImageSize),
                    *data = get(kData);
  if (model == nullptr && width == nullptr && size == nullptr && data == nullptr) {
    return std::nullopt;
  }
  const std::string where = "checkpoint '" + path + "' metadata";
  if (model == nullptr || width == nullptr || size == nullptr || data == nullptr) {
    throw UsageError(where + " holds some of train.model, train.width, train.image_size and " +
                     "train.data but not all; it was not written by frugal train");
  }
  TrainedWith t;
  t.model = checked_model_name(where, *model);
  t.width = parse_number(where, kWidth, *width, 1.0 / 64, kMaxWidth);
  t.image_size = parse_integer(where, kImageSize, *size, 8, kMaxImageSize);
  if (*data != "fashion-mnist" && *data != "synthetic") {
    throw UsageError(where + ": train.data '" + *data +
                     "' is not a data set frugal knows (fashion-mnist, synthetic)");
  }
  t.data = *data;
  return t;
}

}  // namespace frugal::tools
