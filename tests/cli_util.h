// Runs the built `tmap` binary the way a user does: through a shell, capturing stdout, stderr and
// the exit status.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tmap::testing {

struct CliRun {
  int code = -1;  ///< exit status; 128 + N when killed by signal N
  std::string out, err;
};

/// Runs `command` with /bin/sh in `dir` (the current directory when empty), with the built tmap
/// first on PATH, so that README lines run exactly as written.
inline CliRun shell(const std::string& command, const std::string& dir = {}) {
  static int counter = 0;
  const std::string err_file = std::filesystem::temp_directory_path() /
                               ("tmap_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string bin_dir = std::filesystem::path(TMAP_BINARY).parent_path().string();
  std::string cmd = "PATH='" + bin_dir + "':\"$PATH\"; " + (dir.empty() ? "" : "cd '" + dir + "' && ") + "{ " +
                    command + "\n} 2>'" + err_file + "'";
  CliRun r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_file);
  return r;
}

/// `tmap ARGS` (arguments as one shell-quoted string).
inline CliRun tmap(const std::string& args, const std::string& dir = {}) { return shell("tmap " + args, dir); }

/// A fresh empty directory under the temporary directory, removed with the object.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tmap::testing
