// The canonical encoding that digests of a request are taken over (the result cache's key, a
// batch output's name): each field "<tag>=<length>:<bytes>;", self-delimiting, so that a
// field's bytes never read as the next field and no two different field lists encode alike.
// Numbers as decimal text; reals as their bit patterns (0.1 and the next double up differ).
// Which fields a mesh request has is mesh/shape_fields.h's.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace cube3d {

class CanonicalFields {
 public:
  void field(std::string_view tag, std::string_view bytes) {
    out_.append(tag);
    out_ += '=';
    out_ += std::to_string(bytes.size());
    out_ += ':';
    out_.append(bytes);
    out_ += ';';
  }
  void number(std::string_view tag, uint64_t value) { field(tag, std::to_string(value)); }
  void real(std::string_view tag, double value) { number(tag, std::bit_cast<uint64_t>(value)); }
  void real32(std::string_view tag, float value) { number(tag, std::bit_cast<uint32_t>(value)); }
  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace cube3d
