package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The processor you build and deploy has no -naive flag (#32); the demo
// harness's build, -tags demo, adds it (demo.go).
func TestDeployedProcessorHasNoDemoFlags(t *testing.T) {
	_, err := parse([]string{"-pipeline", "devmetrics", "-naive", "sink"}, func(string) string { return "" })
	assert.ErrorContains(t, err, "flag provided but not defined: -naive")
}
