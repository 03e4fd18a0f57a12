// Key-value metadata that the mesh encoders write into a file (provenance: the prompt, seed and
// settings a shape was made with): glTF asset.extras, OBJ and PLY header comments. The mesh stage
// gives the keys no meaning; pipeline/provenance.h fills them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cube3d {

// JSON's types: a string (UTF-8), an integer of either sign (uint64 written exactly), a finite
// double, a bool, an array of finite doubles.
using MeshMetadataValue =
    std::variant<std::string, int64_t, uint64_t, double, bool, std::vector<double>>;

struct MeshMetadataEntry {
  std::string key;
  MeshMetadataValue value;
  bool operator==(const MeshMetadataEntry&) const = default;
};

// An ordered list of entries: files list them in the order they were added.
class MeshMetadata {
 public:
  // Appends an entry. Throws invalid_argument, naming the key, for a key that is not a plain
  // identifier ([a-z0-9_], not starting with a digit: safe in any header line and as a JSON
  // member), a key already present (a JSON object has one value per member), a NaN or infinite
  // double (JSON has none) or a string that is not valid UTF-8 (JSON text is UTF-8).
  MeshMetadata& add(std::string key, MeshMetadataValue value);

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  const std::vector<MeshMetadataEntry>& entries() const { return entries_; }
  // The value of `key`; nullptr when absent.
  const MeshMetadataValue* find(std::string_view key) const;

  bool operator==(const MeshMetadata&) const = default;

 private:
  std::vector<MeshMetadataEntry> entries_;
};

// A value as JSON text: strings quoted and escaped, integers exact, doubles in the shortest form
// that reads back to the same double, arrays as [a,b,c]. With ensure_ascii every byte is
// printable ASCII: control characters (newline, CR, NUL, ...) and every non-ASCII code point are
// \u escapes, so the text can sit in one header line of a text format whatever the string holds.
std::string metadata_json(const MeshMetadataValue& value, bool ensure_ascii = false);

// The entries as one JSON object, members in order (asset.extras of a GLB).
std::string metadata_json(const MeshMetadata& metadata, bool ensure_ascii = false);

}  // namespace cube3d
