package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The processor you build and deploy has no -naive flag (#32), no
// -clock-offset-file (the chaos run's clock jumps) and no -output-topic
// (its transactional leg); the demo harness's build, -tags demo, adds them
// (demo.go).
func TestDeployedProcessorHasNoDemoFlags(t *testing.T) {
	_, err := parse([]string{"-pipeline", "devmetrics", "-naive", "sink"}, func(string) string { return "" })
	assert.ErrorContains(t, err, "flag provided but not defined: -naive")
	_, err = parse([]string{"-clock-offset-file", "offset"}, func(string) string { return "" })
	assert.ErrorContains(t, err, "flag provided but not defined: -clock-offset-file")
	_, err = parse([]string{"-output-topic", "out"}, func(string) string { return "" })
	assert.ErrorContains(t, err, "flag provided but not defined: -output-topic")
}
