package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// EnsureMavenProject builds the Maven project in src (a pom.xml at its
// root, with its sources) the first time, into
// $cacheDir/maven-build/name-<hash of src> ("" cacheDir means CacheDir()),
// and returns the java -cp value that runs it: its jars and their runtime
// dependencies. The pom must write its build into ${build.out} and the
// classpath of its dependencies into ${build.out}/classpath.txt
// (maven-dependency-plugin's build-classpath at package). A changed source
// builds anew; builds of one source wait for each other (a file lock).
// The error wraps ErrNotInstalled when mvn or java is missing.
func EnsureMavenProject(ctx context.Context, cacheDir, name string, src fs.FS, progress io.Writer) (string, error) {
	if Short() {
		return "", ErrShort
	}
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("embedded: maven project: name %q must be a plain directory name", name)
	}
	sum, err := hashFS(src)
	if err != nil {
		return "", fmt.Errorf("embedded: maven project %s: %w", name, err)
	}
	if cacheDir == "" {
		if cacheDir, err = CacheDir(); err != nil {
			return "", err
		}
	}
	root := filepath.Join(cacheDir, "maven-build")
	dir := filepath.Join(root, name+"-"+sum[:16])
	if cp, err := projectClasspath(dir); err == nil {
		return cp, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, "."+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if cp, err := projectClasspath(dir); err == nil {
		return cp, nil // another process built it while we waited
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("embedded: maven project %s: mvn is needed (%s): %w (%w)", name, installJava, ErrNotInstalled, err)
	}
	if _, err := JavaPath(); err != nil {
		return "", fmt.Errorf("embedded: maven project %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(root, "."+name+"-build-")
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	defer os.RemoveAll(tmp)
	srcDir, out := filepath.Join(tmp, "src"), filepath.Join(tmp, "out")
	if err := os.CopyFS(srcDir, src); err != nil {
		return "", fmt.Errorf("embedded: maven project %s: %w", name, err)
	}
	done := reportProgress(progress, fmt.Sprintf("building %s with Maven into %s, once", name, dir))
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-f", filepath.Join(srcDir, "pom.xml"), "-Dbuild.out="+out, "package")
	cmd.Dir = srcDir
	b, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("embedded: maven project %s: mvn package: %w\n%s", name, err, b)
	}
	done(err)
	if err != nil {
		return "", err
	}
	if _, err := projectClasspath(out); err != nil {
		return "", fmt.Errorf("embedded: maven project %s: %w\n%s", name, err, b)
	}
	if err := os.Rename(out, dir); err != nil {
		return "", fmt.Errorf("embedded: maven project %s: %w", name, err)
	}
	return projectClasspath(dir)
}

// projectClasspath returns the classpath of a built project directory: its
// own jars, then classpath.txt's.
func projectClasspath(dir string) (string, error) {
	deps, err := os.ReadFile(filepath.Join(dir, "classpath.txt"))
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	jars, _ := filepath.Glob(filepath.Join(dir, "*.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("embedded: no jar built in %s", dir)
	}
	slices.Sort(jars)
	return strings.Join(append(jars, strings.TrimSpace(string(deps))), string(os.PathListSeparator)), nil
}

// hashFS returns the hex SHA-256 of every file's path and content in fsys.
func hashFS(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
