package embedded

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ensureTemplate returns a directory of a formatted, never started cluster
// of this version and node count in the cache, formatting it the first
// time under a file lock. Its copies share a cluster id, which is harmless:
// they are separate clusters on separate ports.
func (k *ApacheKafka) ensureTemplate(ctx context.Context) (string, error) {
	cache := k.opts.CacheDir
	if cache == "" {
		var err error
		if cache, err = CacheDir(); err != nil {
			return "", err
		}
	}
	root := filepath.Join(cache, "kafka-format")
	name := fmt.Sprintf("%s-%dnodes", k.opts.Version, k.opts.Nodes)
	if k.opts.Controllers > 0 {
		name += fmt.Sprintf("-%dcontrollers", k.opts.Controllers)
	}
	if k.opts.TransactionVersion > 0 {
		name += fmt.Sprintf("-tv%d", k.opts.TransactionVersion)
	}
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "cluster.id")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, "."+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "cluster.id")); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, "."+name+"-")
	if err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	defer os.RemoveAll(tmp)
	t := &ApacheKafka{opts: k.opts, java: k.java, classpath: k.classpath}
	t.opts.Dir = tmp
	t.opts.Security = KafkaSecurity{} // the copies write their own listeners; SCRAM users are never in a template
	if t.clusterID, err = readOrCreateClusterID(tmp); err != nil {
		return "", err
	}
	ports := make([]int, t.portsPerNode()*t.size())
	for i := range ports {
		ports[i] = 9092 + i // never listened on: the tool only formats
	}
	t.makeNodes(ports)
	if err := t.formatAndStart(ctx, false); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("embedded: %w", err)
	}
	return dir, nil
}

// copyTree copies the files under src into dst, making directories as
// needed.
func copyTree(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("embedded: apache kafka: copy %s: %w", src, err)
	}
	return nil
}

// readOrCreateClusterID returns the cluster id kept in dir, making one the
// first time: every node of a cluster is formatted with it.
func readOrCreateClusterID(dir string) (string, error) {
	path := filepath.Join(dir, "cluster.id")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	var s string
	for s == "" || s[0] == '-' { // as Kafka's own ids: a leading '-' reads as a flag
		var id [16]byte
		_, _ = rand.Read(id[:])
		s = base64.RawURLEncoding.EncodeToString(id[:])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("embedded: apache kafka: %w", err)
	}
	if err := os.WriteFile(path, []byte(s+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("embedded: apache kafka: %w", err)
	}
	return s, nil
}
