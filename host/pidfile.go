package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// writePidFile records a running plugin process as "<pid>\n<binary>\n" in
// dir/plugin-<pid>.pid and returns the file's path ("" when dir is "").
// The binary is path made absolute with symlinks resolved, as
// /proc/<pid>/exe names it, so killStale recognises a plugin loaded by a
// relative path or through a link.
func writePidFile(dir string, pid int, path string, log hclog.Logger) string {
	if dir == "" || pid == 0 {
		return ""
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("cannot create state dir", "dir", dir, "error", err)
		return ""
	}
	file := filepath.Join(dir, fmt.Sprintf("plugin-%d.pid", pid))
	if err := os.WriteFile(file, []byte(fmt.Sprintf("%d\n%s\n", pid, path)), 0o600); err != nil {
		log.Warn("cannot write pid file", "file", file, "error", err)
		return ""
	}
	return file
}

func removePidFile(file string) {
	if file != "" {
		os.Remove(file)
	}
}

// killStale kills the plugin processes recorded in dir's pid files that are
// still running the recorded binary (/proc/<pid>/exe), and removes the files.
func killStale(dir string, log hclog.Logger) {
	files, _ := filepath.Glob(filepath.Join(dir, "plugin-*.pid"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
		if len(lines) == 2 {
			pid, err := strconv.Atoi(lines[0])
			if err == nil && pid > 0 && pid != os.Getpid() {
				exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				if err == nil && strings.TrimSuffix(exe, " (deleted)") == lines[1] {
					if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
						log.Warn("killed stale plugin process from a previous run", "pid", pid, "path", lines[1])
					}
				}
			}
		}
		os.Remove(file)
	}
}
