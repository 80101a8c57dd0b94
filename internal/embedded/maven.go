package embedded

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// mavenDependencyPlugin is the plugin that copies the jars, pinned so a
// fetch does the same on every machine whatever Maven's own default is.
const mavenDependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

// mavenCoordsFile, inside a fetched directory, lists the coordinates it was
// fetched for, one a line: a second EnsureMaven under the same name with
// other coordinates is refused instead of silently using the wrong jars.
const mavenCoordsFile = "coords.txt"

// installJava is what the errors of a missing java or mvn tell the user to
// run.
const installJava = "apt-get install maven default-jre-headless, or make deps"

// EnsureMaven returns the directory $cacheDir/maven/name ("" cacheDir means
// CacheDir()) holding the jars of coords ("group:artifact:version") and of
// their runtime dependencies, fetched with Maven the first time: a
// throwaway pom, `mvn dependency:copy-dependencies` into a temporary
// directory under the cache, and a rename, under a file lock, so concurrent
// callers (in this process or others) fetch once and a directory is
// complete or absent. Maven keeps what it downloads in its own local
// repository (~/.m2 unless the user's settings say otherwise), so a second
// name sharing jars with a first downloads only the difference.
//
// name must be unique to the coordinates (put the versions in it):
// fetching other coordinates under a name already fetched fails. The error
// wraps ErrNotInstalled when mvn or java is missing.
func EnsureMaven(ctx context.Context, cacheDir, name string, coords ...string) (string, error) {
	if Short() {
		return "", ErrShort
	}
	return ensureMaven(ctx, cacheDir, name, nil, coords...)
}

// ensureMaven is EnsureMaven that writes progress lines to progress (nil:
// none) while Maven runs.
func ensureMaven(ctx context.Context, cacheDir, name string, progress io.Writer, coords ...string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("embedded: maven: name %q must be a plain directory name", name)
	}
	if len(coords) == 0 {
		return "", fmt.Errorf("embedded: maven %s: no coordinates", name)
	}
	deps := make([]mavenDependency, 0, len(coords))
	for _, c := range coords {
		d, err := parseMavenCoords(c)
		if err != nil {
			return "", fmt.Errorf("embedded: maven %s: %w", name, err)
		}
		deps = append(deps, d)
	}
	if cacheDir == "" {
		var err error
		if cacheDir, err = CacheDir(); err != nil {
			return "", err
		}
	}
	root := filepath.Join(cacheDir, "maven")
	dir := filepath.Join(root, name)
	want := strings.Join(coords, "\n") + "\n"
	if ok, err := mavenFetched(dir, want); ok || err != nil {
		return dir, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, "."+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if ok, err := mavenFetched(dir, want); ok || err != nil {
		return dir, err // another process finished while we waited
	}

	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("embedded: maven %s: mvn is needed to fetch %s (%s): %w (%w)",
			name, strings.Join(coords, " "), installJava, ErrNotInstalled, err)
	}
	if _, err := JavaPath(); err != nil {
		return "", fmt.Errorf("embedded: maven %s: %w", name, err)
	}
	tmp, err := os.MkdirTemp(root, "."+name+"-fetch-")
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	defer os.RemoveAll(tmp)
	pom, err := mavenPOM(deps)
	if err != nil {
		return "", fmt.Errorf("embedded: maven %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "pom.xml"), pom, 0o644); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	lib := filepath.Join(tmp, "lib")
	done := reportProgress(progress, fmt.Sprintf("fetching %s with Maven into %s, once", strings.Join(coords, " "), dir))
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-f", filepath.Join(tmp, "pom.xml"),
		mavenDependencyPlugin+":copy-dependencies",
		"-DoutputDirectory="+lib, "-DincludeScope=runtime")
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		err = fmt.Errorf("embedded: maven %s: mvn dependency:copy-dependencies %s: %w\n%s", name, strings.Join(coords, " "), err, out)
	}
	done(err)
	if err != nil {
		return "", err
	}
	jars, _ := filepath.Glob(filepath.Join(lib, "*.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("embedded: maven %s: mvn copied no jars for %s\n%s", name, strings.Join(coords, " "), out)
	}
	if err := os.WriteFile(filepath.Join(lib, mavenCoordsFile), []byte(want), 0o644); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	if err := os.Rename(lib, dir); err != nil {
		return "", fmt.Errorf("embedded: maven %s: %w", name, err)
	}
	return dir, nil
}

// mavenFetched reports whether dir holds a complete fetch of want (its
// coordinates file), and fails if it holds another one.
func mavenFetched(dir, want string) (bool, error) {
	got, err := os.ReadFile(filepath.Join(dir, mavenCoordsFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("embedded: %w", err)
	}
	if string(got) != want {
		return false, fmt.Errorf("embedded: maven: %s holds %q, not %q: choose another name, or remove the directory",
			dir, strings.TrimSpace(string(got)), strings.TrimSpace(want))
	}
	return true, nil
}

// JavaPath returns the java program: $JAVA_HOME/bin/java if JAVA_HOME is
// set, else java on PATH. The error wraps ErrNotInstalled.
func JavaPath() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("java is needed (%s): %w (%w)", installJava, ErrNotInstalled, err)
	}
	return p, nil
}

// MavenClasspath returns the jars of a directory EnsureMaven returned,
// sorted, as a java -cp value.
func MavenClasspath(dir string) (string, error) {
	jars, err := filepath.Glob(filepath.Join(dir, "*.jar"))
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	if len(jars) == 0 {
		return "", fmt.Errorf("embedded: no jars in %s: %w", dir, ErrNotInstalled)
	}
	slices.Sort(jars)
	return strings.Join(jars, string(os.PathListSeparator)), nil
}

// mavenDependency is one <dependency> of the throwaway pom.
type mavenDependency struct {
	GroupID    string `xml:"groupId"`
	ArtifactID string `xml:"artifactId"`
	Version    string `xml:"version"`
}

// parseMavenCoords reads "group:artifact:version".
func parseMavenCoords(s string) (mavenDependency, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || slices.Contains(parts, "") {
		return mavenDependency{}, fmt.Errorf("coordinates %q: want group:artifact:version", s)
	}
	return mavenDependency{GroupID: parts[0], ArtifactID: parts[1], Version: parts[2]}, nil
}

// mavenPOM writes a pom whose only content is deps.
func mavenPOM(deps []mavenDependency) ([]byte, error) {
	type project struct {
		XMLName      xml.Name          `xml:"project"`
		Xmlns        string            `xml:"xmlns,attr"`
		ModelVersion string            `xml:"modelVersion"`
		GroupID      string            `xml:"groupId"`
		ArtifactID   string            `xml:"artifactId"`
		Version      string            `xml:"version"`
		Packaging    string            `xml:"packaging"`
		Dependencies []mavenDependency `xml:"dependencies>dependency"`
	}
	b, err := xml.MarshalIndent(project{
		Xmlns:        "http://maven.apache.org/POM/4.0.0",
		ModelVersion: "4.0.0",
		GroupID:      "exactlyonce.embedded",
		ArtifactID:   "fetch",
		Version:      "0",
		Packaging:    "pom",
		Dependencies: deps,
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}
