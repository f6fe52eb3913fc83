#include "tmap/support/files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "tmap/support/diagnostic.h"

namespace tmap {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void refuse(const std::string& option, const std::string& path, const std::string& why,
                         const std::string& hint) {
  throw UserError(format_diagnostic(SourceLoc::whole(option), "'" + path + "' " + why, hint));
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

bool write_all(int fd, std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void check_writable_target(const std::string& path, const std::string& option) {
  struct stat link {}, target {};
  if (::lstat(path.c_str(), &link) != 0) return;  // absent: it will be created
  const bool is_link = S_ISLNK(link.st_mode);
  if (is_link && ::stat(path.c_str(), &target) != 0)
    refuse(option, path, "is a symbolic link to nothing", "give the path of a regular file");
  const mode_t mode = is_link ? target.st_mode : link.st_mode;
  if (!S_ISREG(mode))
    refuse(option, path, std::string("is ") + kind_of(mode) + (is_link ? " (through a symbolic link)" : "") +
                             ", not a regular file: tmap replaces regular files only",
           "give the path of a regular file, or of one to create");
}

void write_file(const std::string& path, const std::string& text, const std::string& option) {
  check_writable_target(path, option);
  std::error_code absent, ec;  // an absent path is no link
  const fs::path target = fs::is_symlink(path, absent) ? fs::canonical(path, ec) : fs::path(path);
  if (ec) refuse(option, path, "cannot be resolved: " + ec.message(), "give the path of a regular file");
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::string tmp = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) refuse(option, path, std::string("cannot be written: ") + std::strerror(errno), "check the directory");
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const int write_errno = errno;
  struct stat old {};
  if (::stat(target.c_str(), &old) == 0) ::fchmod(fd, old.st_mode & 07777);  // keep the file's permissions
  else ::fchmod(fd, 0644);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(ok ? errno : write_errno);
    ::unlink(tmp.c_str());
    refuse(option, path, "cannot be written: " + why, "check the disk and the directory");
  }
}

bool read_bounded(const std::string& path, std::uintmax_t max_bytes, std::string& text, std::string& error,
                  double idle_seconds) {
  text.clear();
  // Non-blocking: opening a FIFO without a writer does not wait, and reads wait in poll() only.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    error = "it is a directory";
    return false;
  }
  const std::string limit = std::to_string(max_bytes >> 20) + " MiB";
  if (S_ISREG(st.st_mode) && static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    ::close(fd);
    error = "it is " + std::to_string(static_cast<std::uintmax_t>(st.st_size) >> 20) + " MiB; tmap reads at most " + limit;
    return false;
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<std::size_t>(n));
      if (text.size() > max_bytes) {
        error = "it goes on past " + limit + ", the most tmap reads";
        break;
      }
      continue;
    }
    if (n == 0) {
      ::close(fd);
      return true;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      error = std::strerror(errno);
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(idle_seconds * 1000)) == 0) {
      error = "no data came for " + std::to_string(static_cast<int>(idle_seconds)) + " s";
      break;
    }
  }
  ::close(fd);
  text.clear();
  return false;
}

TemporaryDirectory::TemporaryDirectory(const std::string& prefix, const std::string& what) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
  if (!::mkdtemp(templ.data())) throw std::runtime_error("cannot create a temporary directory for " + what);
  path_ = templ;
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace tmap
