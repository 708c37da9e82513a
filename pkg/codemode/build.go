package codemode

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// CacheDirEnv names the environment variable that overrides where
// code-mode caches built engines and compiled code (DefaultCacheDir).
const CacheDirEnv = "GRAPHORIN_CACHE_DIR"

// enginePackage is the engine program, relative to this package.
const enginePackage = "./engine"

// buildFlags are part of the cache key. -trimpath makes the module's bytes
// the same in every checkout, so that worktrees share one cache entry.
var buildFlags = []string{"-trimpath"}

// engineFile is the module's name in its key's directory.
const engineFile = "engine.wasm"

// keyLen is the length of an engine key: 96 bits of SHA-256 in hex.
const keyLen = 24

// staleAfter is how long an unused engine file stays in the cache.
const staleAfter = 7 * 24 * time.Hour

// ErrNoSource is returned by BuildEngine in a binary that was not built
// from a source tree it can still find.
var ErrNoSource = errors.New("codemode: the engine's source tree is not available to build it")

// DefaultCacheDir returns where code-mode keeps its engine files and,
// under "wazero", its compilation cache: $GRAPHORIN_CACHE_DIR/codemode
// when that is set, else <os.UserCacheDir()>/graphorin/codemode
// (~/.cache/graphorin/codemode on Linux). See doc.go, "Why a user cache
// directory".
func DefaultCacheDir() (string, error) {
	if dir := os.Getenv(CacheDirEnv); dir != "" {
		return filepath.Join(dir, "codemode"), nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("codemode: no cache directory (set %s): %w", CacheDirEnv, err)
	}
	return filepath.Join(dir, "graphorin", "codemode"), nil
}

// BuildEngine builds the engine program (pkg/codemode/engine) for wasip1
// with the local Go toolchain and returns the path of the module file,
// <cacheDir>/<key>/engine.wasm ("" means DefaultCacheDir()). The key is
// a hash of everything that goes into the module: the Go version, the
// build flags, the source of every package of this module the engine
// imports, and the version and checksum of every other module (goja and
// what it pulls). So a file, once built, is reused until one of those
// changes, and an edited engine never runs stale.
//
// The directory of the file is the place for its compiled code too:
// pass filepath.Join(filepath.Dir(path), "wazero") as Config.CacheDir
// (CompileCacheDir does that). Each BuildEngine marks its directory used;
// when it builds a new one it removes the directories of engines not
// used for 7 days, compiled code and all (about 85 MB each).
//
// It needs the go command and this module's source tree (found from
// where this file was compiled): it serves development, tests and
// `go run`. A deployed worker ships the module built by
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -o engine.wasm ./pkg/codemode/engine
//
// and passes its bytes as Config.EngineModule; elsewhere BuildEngine
// fails with ErrNoSource.
func BuildEngine(ctx context.Context, cacheDir string) (string, error) {
	return BuildEngineNotify(ctx, cacheDir, nil)
}

// BuildEngineNotify is BuildEngine that calls building, when it is not
// nil, just before it runs go build: when the module for this source is
// not in the cache yet (a host logs the start of a build that takes a
// minute).
func BuildEngineNotify(ctx context.Context, cacheDir string, building func()) (string, error) {
	if cacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return "", err
		}
		cacheDir = d
	}
	srcDir, err := sourceDir()
	if err != nil {
		return "", err
	}
	goBin, err := goCommand()
	if err != nil {
		return "", err
	}
	key, err := engineKey(ctx, goBin, srcDir)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheDir, key)
	path := filepath.Join(dir, engineFile)
	if _, err := os.Stat(path); err == nil {
		now := time.Now()
		_ = os.Chtimes(path, now, now) // mark it used, for pruneEngines
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("codemode: cache directory: %w", err)
	}

	if building != nil {
		building()
	}
	// Build next to the final name and rename, so that a concurrent
	// BuildEngine (another test binary) never sees half a file.
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	tmp := fmt.Sprintf("%s.%x.tmp", path, nonce)
	defer os.Remove(tmp)
	args := append([]string{"build"}, buildFlags...)
	args = append(args, "-o", tmp, enginePackage)
	if _, err := runGo(ctx, goBin, srcDir, args...); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("codemode: %w", err)
	}
	pruneEngines(cacheDir, key)
	return path, nil
}

// CompileCacheDir returns the directory for the compiled code of the
// engine module BuildEngine returned at enginePath.
func CompileCacheDir(enginePath string) string {
	return filepath.Join(filepath.Dir(enginePath), "wazero")
}

// sourceDir is this package's directory in the source tree, as the
// compiler saw it. A -trimpath build records a module path instead.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", ErrNoSource
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(filepath.Join(dir, "engine", "main.go")); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoSource, err)
	}
	return dir, nil
}

// goCommand finds the go command: the one of the toolchain in GOROOT (the
// one running `go test`) when there is one, else the one on PATH.
func goCommand() (string, error) {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("codemode: BuildEngine needs the go command: %w", err)
	}
	return p, nil
}

func runGo(ctx context.Context, goBin, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("codemode: go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// listedPackage is what engineKey reads of `go list -json`.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	GoFiles    []string
	EmbedFiles []string
	Module     *struct {
		Path    string
		Version string
		Sum     string
		Main    bool
		Replace *struct {
			Path    string
			Version string
			Sum     string
		}
	}
}

// engineKey hashes what the engine module is built from.
func engineKey(ctx context.Context, goBin, srcDir string) (string, error) {
	version, err := runGo(ctx, goBin, srcDir, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	out, err := runGo(ctx, goBin, srcDir, "list", "-deps", "-json", enginePackage)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\nflags %q\n", bytes.TrimSpace(version), buildFlags)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("codemode: go list: %w", err)
		}
		switch {
		case p.Standard:
			// Covered by the Go version.
		case p.Module != nil && !p.Module.Main:
			m := p.Module
			fmt.Fprintf(h, "module %s %s %s\n", m.Path, m.Version, m.Sum)
			if r := m.Replace; r != nil {
				fmt.Fprintf(h, "replace %s %s %s\n", r.Path, r.Version, r.Sum)
			}
		default:
			// A package of this module: its files are its identity.
			fmt.Fprintf(h, "package %s\n", p.ImportPath)
			for _, f := range append(p.GoFiles, p.EmbedFiles...) {
				b, err := os.ReadFile(filepath.Join(p.Dir, f))
				if err != nil {
					return "", fmt.Errorf("codemode: %w", err)
				}
				fmt.Fprintf(h, "file %s %d\n", f, len(b))
				h.Write(b)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:keyLen], nil
}

// pruneEngines removes the engine directories other than keep's whose
// engine was not used for staleAfter. BuildEngine touches the engine it
// returns, so no engine a process is about to load disappears.
func pruneEngines(cacheDir, keep string) {
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, ent := range entries {
		if !ent.IsDir() || ent.Name() == keep || !isKey(ent.Name()) {
			continue
		}
		dir := filepath.Join(cacheDir, ent.Name())
		fi, err := os.Stat(filepath.Join(dir, engineFile))
		if err == nil && time.Since(fi.ModTime()) <= staleAfter {
			continue
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(dir)
		}
	}
}

// isKey reports whether name looks like an engine key, so that pruning
// never touches anything else a user keeps in the directory.
func isKey(name string) bool {
	if len(name) != keyLen {
		return false
	}
	_, err := hex.DecodeString(name)
	return err == nil
}
