#include "hf/safetensors.h"

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/float16.h"

namespace gpt {
namespace {

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "F64") return 8;
  return 0;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    value = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    value = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -value : value;
}

}  // namespace

std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  std::error_code error;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path, error));
  if (error) return absl::NotFoundError(absl::StrCat(path, ": ", error.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  unsigned char length_bytes[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8)) {
    return absl::DataLossError(absl::StrCat(path, ": not a safetensors file (", size, " bytes, no header length)"));
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  if (length == 0 || length > static_cast<uint64_t>(size - 8) || length > (uint64_t{100} << 20)) {
    return absl::DataLossError(absl::StrCat(path, ": the header length ", length, " does not fit the file's ", size,
                                            " bytes"));
  }
  std::string header(length, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(length))) {
    return absl::DataLossError(absl::StrCat(path, ": truncated header"));
  }
  file.data_start_ = 8 + static_cast<int64_t>(length);
  const int64_t data_bytes = size - file.data_start_;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::padded_string padded(header);
  simdjson::dom::object top;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS || root.get_object().get(top) != simdjson::SUCCESS) {
    return absl::DataLossError(absl::StrCat(path, ": the header is not a JSON object"));
  }
  for (const simdjson::dom::key_value_pair field : top) {
    const std::string name(field.key);
    if (name == "__metadata__") {
      simdjson::dom::object metadata;
      if (field.value.get_object().get(metadata) != simdjson::SUCCESS) {
        return absl::DataLossError(absl::StrCat(path, ": __metadata__ is not an object"));
      }
      for (const simdjson::dom::key_value_pair m : metadata) {
        std::string_view value;
        if (m.value.get_string().get(value) == simdjson::SUCCESS) file.metadata_[std::string(m.key)] = std::string(value);
      }
      continue;
    }
    auto bad = [&](const std::string& why) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", name, "': ", why));
    };
    SafetensorsEntry entry;
    std::string_view dtype;
    simdjson::dom::array shape, offsets;
    if (field.value["dtype"].get_string().get(dtype) != simdjson::SUCCESS ||
        field.value["shape"].get_array().get(shape) != simdjson::SUCCESS ||
        field.value["data_offsets"].get_array().get(offsets) != simdjson::SUCCESS) {
      return bad("the header entry lacks dtype, shape or data_offsets");
    }
    entry.dtype = std::string(dtype);
    if (dtype_bytes(entry.dtype) == 0) return bad(absl::StrCat("dtype ", entry.dtype, " is not a float type read here"));
    int64_t count = 1;
    for (const simdjson::dom::element d : shape) {
      int64_t v = 0;
      if (d.get_int64().get(v) != simdjson::SUCCESS || v < 0 || v > (int64_t{1} << 40)) return bad("malformed shape");
      entry.shape.push_back(v);
      count *= v;
      if (count > (int64_t{1} << 40)) return bad("shape too large");
    }
    std::vector<int64_t> range;
    for (const simdjson::dom::element o : offsets) {
      int64_t v = 0;
      if (o.get_int64().get(v) != simdjson::SUCCESS || v < 0) return bad("malformed data_offsets");
      range.push_back(v);
    }
    if (range.size() != 2 || range[1] < range[0]) return bad("data_offsets is not [begin, end]");
    entry.begin = range[0];
    entry.end = range[1];
    if (entry.end > data_bytes) {
      return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] run past the file's ", data_bytes,
                              " data bytes"));
    }
    if (entry.end - entry.begin != count * dtype_bytes(entry.dtype)) {
      return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] hold ", entry.end - entry.begin,
                              " bytes, but shape [", absl::StrJoin(entry.shape, ", "), "] of ", entry.dtype, " needs ",
                              count * dtype_bytes(entry.dtype)));
    }
    if (!file.entries_.emplace(name, entry).second) return bad("listed twice");
  }
  // No two tensors share bytes.
  std::vector<std::pair<int64_t, std::string>> starts;
  for (const auto& [name, entry] : file.entries_) {
    if (entry.end > entry.begin) starts.emplace_back(entry.begin, name);
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) {
    const SafetensorsEntry& previous = file.entries_.at(starts[i - 1].second);
    if (starts[i].first < previous.end) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", starts[i].second, "' overlaps tensor '",
                                              starts[i - 1].second, "' in the data"));
    }
  }
  return file;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::read_float32(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", name, "'"));
  const SafetensorsEntry& e = it->second;
  std::vector<unsigned char> bytes(static_cast<size_t>(e.end - e.begin));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + e.begin);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
    return absl::DataLossError(absl::StrCat(path_, ": tensor '", name, "': short read"));
  }
  const size_t count = bytes.size() / static_cast<size_t>(dtype_bytes(e.dtype));
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* p = bytes.data() + i * static_cast<size_t>(dtype_bytes(e.dtype));
    if (e.dtype == "F32") {
      std::memcpy(&values[i], p, 4);
    } else if (e.dtype == "BF16") {
      const uint32_t bits = static_cast<uint32_t>(p[0] | (p[1] << 8)) << 16;
      std::memcpy(&values[i], &bits, 4);
    } else if (e.dtype == "F16") {
      values[i] = half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
    } else {
      double v;
      std::memcpy(&v, p, 8);
      values[i] = static_cast<float>(v);
    }
  }
  return values;
}

absl::Status write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> entries;
  std::vector<std::string> meta;
  for (const auto& [key, value] : metadata) meta.push_back(json_quote(key) + ":" + json_quote(value));
  entries.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(meta, ","), "}"));
  int64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const auto bytes = static_cast<int64_t>(t.values.size() * 4);
    entries.push_back(absl::StrCat(json_quote(t.name), ":{\"dtype\":\"F32\",\"shape\":[", absl::StrJoin(t.shape, ","),
                                   "],\"data_offsets\":[", offset, ",", offset + bytes, "]}"));
    offset += bytes;
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  while (header.size() % 8 != 0) header += ' ';
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (!file) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temporary, ": ", std::strerror(errno)));
  auto put = [&](const void* data, size_t bytes) { return std::fwrite(data, 1, bytes, file) == bytes; };
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  bool written = put(length, 8) && put(header.data(), header.size());
  for (const SafetensorsTensor& t : tensors) written = written && put(t.values.data(), t.values.size() * 4);
  written = written && std::fflush(file) == 0;
  if (std::fclose(file) != 0 || !written) {
    std::remove(temporary.c_str());
    return absl::DataLossError(absl::StrCat("writing ", temporary, " failed: ", std::strerror(errno)));
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) return absl::DataLossError(absl::StrCat("cannot rename ", temporary, " to ", path, ": ", error.message()));
  return absl::OkStatus();
}

}  // namespace gpt
