// Reading and writing safetensors files: strict validation on load (every defect names the file,
// the tensor and the byte offset), atomic replacement on save.
#include "train/safetensors.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "base/input_file.h"
#include "train/atomic_file.h"

namespace frugal::train {

namespace {

using json = nlohmann::ordered_json;  // keeps the writer's key order (__metadata__ first)

// The format stores elements little-endian; tensors are written and read as they lie in memory.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O copies tensor bytes as they are: a little-endian host only");

constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16,
                                DType::f64, DType::i64, DType::u8};

// A JSON value for a message: at most kBriefChars of it (a hostile header can hold megabytes in
// one value), invalid UTF-8 replaced rather than thrown on.
constexpr size_t kBriefChars = 80;
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kBriefChars) s = s.substr(0, kBriefChars - 3) + "...";
  return s;
}

// A name for a message, as brief as a value (a tensor's name can be megabytes long too).
std::string brief_name(const std::string& name) {
  const std::string quoted = brief(json(name));  // "name", escaped
  return quoted.substr(1, quoted.size() - (quoted.back() == '"' ? 2 : 1));
}

// One place for the load errors' wording: file, then the tensor when there is one, then where.
[[noreturn]] void bad_file(const std::string& path, const std::string& tensor, uint64_t offset,
                           const std::string& what) {
  std::string who = tensor.empty() ? "" : "tensor '" + brief_name(tensor) + "': ";
  FRUGAL_FAIL("load_safetensors: '", path, "': ", who, what, " (at byte offset ", offset, ")");
}

// Where top-level key `name` is in the file: the first occurrence of it quoted and followed by a
// colon and an object (or null), which a field of an entry ("dtype": "F32") is not; 8, the
// header's start, when it is written with other escapes. A scan of the header: only for errors.
uint64_t key_offset(const std::string& text, const std::string& name) {
  const std::string quoted = json(name).dump(-1, ' ', false, json::error_handler_t::replace);
  auto skip_space = [&](size_t i) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    return i;
  };
  for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1)) {
    size_t next = skip_space(at + quoted.size());
    if (next >= text.size() || text[next] != ':') continue;
    next = skip_space(next + 1);
    if (next < text.size() && (text[next] == '{' || text[next] == 'n')) return 8 + at;
  }
  return 8;
}

// Text a JSON header can hold: valid UTF-8.
bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// A safetensors header nests three levels deep ({name: {"shape": [...]}}); a much deeper one is
// refused before parsing, so that nothing later (printing a value, say) recurses without bound.
constexpr int kMaxHeaderDepth = 32;

// The offset within `text` of the first bracket deeper than kMaxHeaderDepth, or npos.
size_t too_deep_at(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxHeaderDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// n_elements * size in bytes, or false when it does not fit in 64 bits.
bool byte_size(const std::vector<int64_t>& dims, DType t, uint64_t* out) {
  uint64_t n = dtype_size(t);
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> dims;
  uint64_t begin, end;
};

// Checks one header entry (name -> {dtype, shape, data_offsets}); messages give the offset of its
// key in the file (`text` is the header), as nlohmann does not keep value positions.
Entry parse_entry(const std::string& path, const std::string& name, const json& v,
                  const std::string& text) {
  auto fail = [&](const std::string& what) { bad_file(path, name, key_offset(text, name), what); };
  if (!v.is_object()) fail("header entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) fail(std::string("no '") + key + "' field");
  }
  Entry e;
  e.name = name;
  const json& dt = v["dtype"];
  if (!dt.is_string() || !parse_safetensors_dtype(dt.get<std::string>(), &e.dtype)) {
    fail("unknown dtype " + brief(dt) + " (frugal reads F32, F16, BF16, F64, I64, U8)");
  }
  const json& shape = v["shape"];
  if (!shape.is_array()) fail("shape is not an array");
  for (const json& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail("shape " + brief(shape) + " has a bad extent " + brief(d));
    }
    e.dims.push_back(d.get<int64_t>());
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    fail("data_offsets " + brief(off) + " is not a pair of non-negative integers");
  }
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.end < e.begin) {
    fail("data_offsets " + brief(off) + " end before they begin");
  }
  uint64_t want = 0;
  if (!byte_size(e.dims, e.dtype, &want) || e.end - e.begin != want) {
    fail(detail::str("data_offsets ", brief(off), " hold ", e.end - e.begin, " bytes but shape ",
                     Shape(e.dims), " of ", safetensors_dtype_name(e.dtype), " needs ",
                     byte_size(e.dims, e.dtype, &want) ? std::to_string(want) : "over 2^64"));
  }
  // Even an empty tensor's strides are products of its other extents: they must fit in int64.
  uint64_t span = 1;
  for (int64_t d : e.dims) {
    if (d > 0 && (__builtin_mul_overflow(span, static_cast<uint64_t>(d), &span) ||
                  span > static_cast<uint64_t>(INT64_MAX))) {
      fail("shape " + brief(shape) + " spans more than 2^63 elements (its strides overflow)");
    }
  }
  return e;
}

void put_u64_le(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get_u64_le(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::f64:
      return "F64";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  return "?";
}

bool parse_safetensors_dtype(const std::string& s, DType* out) {
  for (DType t : kAllDTypes) {
    if (s == safetensors_dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    FRUGAL_CHECK(name != "__metadata__", "save_safetensors: '", path,
                 "': '__metadata__' is reserved and cannot name a tensor");
    FRUGAL_CHECK(names.insert(name).second, "save_safetensors: '", path, "': tensor name '", name,
                 "' appears twice");
    FRUGAL_CHECK(t.defined(), "save_safetensors: '", path, "': tensor '", name, "' is undefined");
    FRUGAL_CHECK(!t.device().is_meta(), "save_safetensors: '", path, "': tensor '", name,
                 "' is on the meta device and has no data");
    FRUGAL_CHECK(valid_utf8(name), "save_safetensors: '", path, "': tensor name ",
                 brief(json(name)), " is not valid UTF-8, which the JSON header must be");
  }
  for (const auto& [k, v] : metadata) {
    FRUGAL_CHECK(valid_utf8(k) && valid_utf8(v), "save_safetensors: '", path,
                 "': __metadata__ entry ", brief(json(k)), " = ", brief(json(v)),
                 " is not valid UTF-8, which the JSON header must be");
  }
  // Widest elements first keeps every tensor aligned to its element size (the reference's order).
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });

  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    header[tensors[i].first] = {{"dtype", safetensors_dtype_name(t.dtype())},
                                {"shape", t.shape().dims()},
                                {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned

  // Note [Save targets]: a failure anywhere below leaves the previous file as it was.
  AtomicFile file(path, "save_safetensors");
  char len[8];
  put_u64_le(text.size(), len);
  file.write(len, 8);
  file.write(text.data(), text.size());
  for (size_t i : order) {
    Tensor host = tensors[i].second.detach().to(Device::cpu());  // synchronises a device copy
    if (host.nbytes() > 0) file.write(host.data_ptr(), host.nbytes());
  }
  file.commit();
}

SafetensorsFile load_safetensors(const std::string& path) {
  InputFile in(path, "load_safetensors");  // a directory, FIFO or device is refused here
  const uint64_t file_size = in.size();
  if (file_size < 8) {
    bad_file(
        path, "", 0,
        detail::str("the file is ", file_size, " bytes, shorter than the 8-byte header length"));
  }
  unsigned char len_bytes[8];
  in.read_exact_at(0, len_bytes, 8);
  const uint64_t n = get_u64_le(len_bytes);
  if (n > kMaxSafetensorsHeader) {
    bad_file(
        path, "", 0,
        detail::str("header length ", n, " exceeds the ", kMaxSafetensorsHeader, "-byte limit"));
  }
  if (n > file_size - 8) {
    bad_file(
        path, "", 0,
        detail::str("header length ", n, " runs past the end of the ", file_size, "-byte file"));
  }
  std::string text(n, '\0');
  in.read_exact_at(8, text.data(), n);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) {
    bad_file(path, "", 8, "the header starts with a UTF-8 byte order mark, which JSON forbids");
  }
  if (size_t at = too_deep_at(text); at != std::string::npos) {
    bad_file(path, "", 8 + at,
             detail::str("the header nests deeper than ", kMaxHeaderDepth, " levels"));
  }

  // Parse, noting duplicate top-level keys (a JSON object would silently keep the last one).
  std::set<std::string> keys, fields;
  std::string duplicate, duplicate_field;
  // The last tensor name and field seen, to name them when a number is out of range (nlohmann
  // reports that without a position).
  std::string tensor, field;
  json header;
  try {
    header = json::parse(text, [&](int depth, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::key && depth == 1) {
        tensor = parsed.get<std::string>();
        field.clear();
        fields.clear();
        if (!keys.insert(tensor).second && duplicate.empty()) duplicate = tensor;
      } else if (ev == json::parse_event_t::key && depth == 2) {
        field = parsed.get<std::string>();
        // A field given twice: readers that keep the first or the last one disagree.
        if (!fields.insert(field).second && duplicate.empty()) {
          duplicate = tensor;
          duplicate_field = field;
        }
      }
      return true;
    });
  } catch (const json::parse_error& e) {
    bad_file(path, "", 8 + (e.byte > 0 ? e.byte - 1 : 0),
             std::string("the header is not valid JSON: ") + e.what());
  } catch (const json::exception& e) {  // a number out of range (out_of_range 406)
    bad_file(path, tensor, 8,
             (field.empty() ? std::string() : "field '" + brief_name(field) + "': ") +
                 "a value in the header cannot be read: " + e.what());
  }
  if (!header.is_object()) bad_file(path, "", 8, "the header is not a JSON object");
  if (!duplicate.empty()) {
    bad_file(path, duplicate, key_offset(text, duplicate),
             duplicate_field.empty()
                 ? std::string("the name appears twice in the header")
                 : "field '" + brief_name(duplicate_field) + "' appears twice in its entry");
  }

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (v.is_null()) continue;  // the reference reader's "no metadata"
      if (!v.is_object())
        bad_file(path, "", key_offset(text, name), "__metadata__ is not a JSON object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) {
          bad_file(path, "", key_offset(text, name),
                   "__metadata__ value of '" + brief_name(k) + "' is not a string: " + brief(s));
        }
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, v, text));
  }

  // The tensors must tile the data section: sorted by offset, each begins where the last ended.
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = file_size - data_start;
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < expected) {
      bad_file(path, e.name, data_start + e.begin,
               detail::str("data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
                           brief_name(prev->name), "' [", prev->begin, ", ", prev->end, "]"));
    }
    if (e.begin > expected) {
      bad_file(path, e.name, data_start + expected,
               detail::str("data_offsets [", e.begin, ", ", e.end, "] leave a gap of ",
                           e.begin - expected, " bytes after ",
                           prev ? "tensor '" + brief_name(prev->name) + "'" : "the header"));
    }
    if (e.end > data_size) {
      bad_file(path, e.name, data_start + e.begin,
               detail::str("data_offsets [", e.begin, ", ", e.end,
                           "] reach outside the data section of ", data_size, " bytes"));
    }
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size) {
    bad_file(
        path, "", data_start + expected,
        detail::str("the data section is ", data_size, " bytes but the tensors cover ", expected));
  }

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(Shape(e.dims), {.dtype = e.dtype});
    if (t.nbytes() > 0) {
      in.read_exact_at(data_start + e.begin, t.data_ptr(), t.nbytes());
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace frugal::train
