// Writing files that may name anything: a path from the command line can be a device, a FIFO,
// a directory or a link, and a write can fail half way. tmap replaces only regular files, and
// replaces them whole.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tmap {

/// Writes all of `text` to the descriptor `fd`, retrying short and interrupted writes; false
/// (errno set by the failing write) if it cannot.
bool write_all(int fd, std::string_view text);

/// Refuses (UserError naming `option` and the path) a target that exists and is not a regular
/// file: a device, FIFO, socket or directory, or a symbolic link to anything but a regular file.
void check_writable_target(const std::string& path, const std::string& option);

/// Writes `text` to `path` whole: into a temporary file in the target's directory, then renamed
/// over it, so that a reader never sees half a file and a failed write keeps the old one. A
/// symbolic link to a regular file is written through (the link stays). Refuses what
/// check_writable_target() refuses; a failed write is a UserError naming `option`.
void write_file(const std::string& path, const std::string& text, const std::string& option);

/// The whole content of `path`, read with bounds that hold for any kind of file: at most
/// `max_bytes` (a device such as /dev/zero never ends), and no more than `idle_seconds` without
/// data (a FIFO or a pipe whose writer stalls). Returns false with `error` set (without the path)
/// when a bound is crossed, the path is a directory, or it cannot be read.
bool read_bounded(const std::string& path, std::uintmax_t max_bytes, std::string& text, std::string& error,
                  double idle_seconds = 10);

/// A fresh directory under the system's temporary directory (its name `prefix` and a random
/// suffix), removed with everything in it when this is destroyed. Throws std::runtime_error
/// saying that the directory for `what` cannot be created.
class TemporaryDirectory {
 public:
  TemporaryDirectory(const std::string& prefix, const std::string& what);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tmap
