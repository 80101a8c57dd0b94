package main

import (
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestGroupProtocolFlag: -group-protocol (or KAFKA_GROUP_PROTOCOL) chooses
// the protocol the processor joins its group with; the default is auto
// (the consumer protocol where the brokers offer it, else the classic
// one); a typo is refused, not taken for the default. -group-instance-id needs the consumer protocol (or auto).
func TestGroupProtocolFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parse(nil, noEnv)
	require.NoError(t, err)
	assert.Equal(t, kafkasource.ProtocolAuto, c.groupProtocol)

	c, err = parse([]string{"-group-protocol", "consumer"}, noEnv)
	require.NoError(t, err)
	assert.Equal(t, kafkasource.ProtocolConsumer, c.groupProtocol)

	c, err = parse(nil, func(k string) string { return map[string]string{"KAFKA_GROUP_PROTOCOL": "consumer"}[k] })
	require.NoError(t, err)
	assert.Equal(t, kafkasource.ProtocolConsumer, c.groupProtocol)

	c, err = parse([]string{"-group-protocol", "auto", "-group-instance-id", "processor-0"}, noEnv)
	require.NoError(t, err)
	assert.Equal(t, kafkasource.ProtocolAuto, c.groupProtocol)

	_, err = parse([]string{"-group-protocol", "cooperative"}, noEnv)
	assert.ErrorContains(t, err, `-group-protocol "cooperative": want classic, consumer or auto`)

	c, err = parse([]string{"-group-protocol", "consumer", "-group-instance-id", "processor-0"}, noEnv)
	require.NoError(t, err)
	assert.Equal(t, "processor-0", c.groupInstanceID)
	_, err = parse([]string{"-group-protocol", "classic", "-group-instance-id", "processor-0"}, noEnv)
	assert.ErrorContains(t, err, "static membership needs -group-protocol consumer (or auto)")
}
