// Lexical path handling for POSIX paths: what a config loader needs to make the paths a file
// names independent of the folder the program later runs in. Torch-free.
//
// No std::filesystem: the torch wheel's libtorch exports its own copies of some std::filesystem
// symbols, which interpose on libstdc++'s and have crashed a test binary; strings and getcwd(3)
// do the job.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cube3d {

bool is_absolute_path(std::string_view path);

// Drops "." segments and repeated or trailing slashes ("/a/./b//c/" -> "/a/b/c"; "" -> ".").
// ".." stays: through a symbolic link it does not cancel the segment before it.
std::string tidy_path(std::string_view path);

// `path` below `base`, tidied; `path` is taken as relative even when it starts with '/'.
std::string join_path(std::string_view base, std::string_view path);

// A relative `path` joined to `base`; an absolute or empty one as it is (empty: "not set").
std::string resolve_path(const std::string& path, std::string_view base);

// The process's working directory; invalid_argument when getcwd(3) cannot say (it was removed).
std::string current_directory();

// resolve_path against the working directory, which is only asked for when `path` is relative.
std::string absolute_path(const std::string& path);

// The absolute, tidied folder holding `file` ("/" for a file at the root).
std::string folder_of(const std::string& file);

// The folder of the running executable (from /proc/self/exe), or nullopt with the reason in
// `why`: where a program finds what is installed beside it (share/cube3d/).
std::optional<std::string> executable_dir(std::string& why);

// The folder above `dir`, lexically ("/a/b/bin" -> "/a/b"; "a" -> "."; "" -> ".."), so that
// paths come out clean.
std::string parent_dir(std::string dir);

}  // namespace cube3d
