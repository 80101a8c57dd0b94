package embedded

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Kafka's security protocols, which name the listeners an ApacheKafka
// broker opens (see KafkaSecurity and ApacheKafka.BrokersOn).
const (
	KafkaPlaintext     = "PLAINTEXT"
	KafkaSASLPlaintext = "SASL_PLAINTEXT"
	KafkaSSL           = "SSL"
	KafkaSASLSSL       = "SASL_SSL"
)

// saslMechanisms are the SASL mechanisms the brokers accept for
// KafkaSecurity.Users.
const saslMechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"

// KafkaSecurity adds client listeners that require SASL, TLS or both to
// every broker of an ApacheKafka (not to dedicated controllers), beside its
// PLAINTEXT listener, which the brokers and controllers keep using among
// themselves and StartApacheKafka's probes use. The zero value adds none.
type KafkaSecurity struct {
	// Users are SASL users and their passwords, accepted with PLAIN,
	// SCRAM-SHA-256 and SCRAM-SHA-512. Set: a SASL_PLAINTEXT listener, and SASL_SSL
	// with a certificate. Names and passwords must not hold any of
	// `"\,=[]` or a line break. The SCRAM credentials are written into the
	// cluster's metadata when a new directory is formatted (kafka-storage
	// format --add-scram), so such a cluster is formatted on its own
	// instead of copied from the cached template (one JVM start of the
	// storage tool more); a Dir formatted before keeps the SCRAM users it
	// was formatted with, while PLAIN takes Users as they are.
	Users map[string]string
	// CertPEM is the server's certificate chain and KeyPEM its private key
	// (RSA, DSA or EC, PKCS#8 "PRIVATE KEY", unencrypted), both PEM. Set:
	// an SSL listener, and SASL_SSL with Users. Kafka reads them inline
	// (ssl.keystore.type=PEM). Clients are not asked for certificates.
	CertPEM, KeyPEM []byte
}

// protocols returns the security protocols of the listeners s adds, in
// the order of their ports.
func (s *KafkaSecurity) protocols() []string {
	var out []string
	if len(s.Users) > 0 {
		out = append(out, KafkaSASLPlaintext)
	}
	if len(s.CertPEM) > 0 {
		out = append(out, KafkaSSL)
		if len(s.Users) > 0 {
			out = append(out, KafkaSASLSSL)
		}
	}
	return out
}

// validate refuses what the broker would refuse at start, or read wrong.
func (s *KafkaSecurity) validate() error {
	if (len(s.CertPEM) > 0) != (len(s.KeyPEM) > 0) {
		return errors.New("embedded: apache kafka: KafkaSecurity needs both CertPEM and KeyPEM, or neither")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		if name == "" || s.Users[name] == "" {
			return fmt.Errorf("embedded: apache kafka: SASL user %q: empty name or password", name)
		}
		if strings.ContainsAny(name+s.Users[name], "\"\\,=[]\r\n") {
			return fmt.Errorf("embedded: apache kafka: SASL user %q: name or password holds one of \"\\,=[] or a line break", name)
		}
	}
	return nil
}

// brokerConfigs returns the configs of s's listeners for a broker, beside
// the listeners themselves.
func (s *KafkaSecurity) brokerConfigs() map[string]string {
	cfg := map[string]string{}
	if len(s.CertPEM) > 0 {
		cfg["ssl.keystore.type"] = "PEM"
		cfg["ssl.keystore.certificate.chain"] = string(s.CertPEM)
		cfg["ssl.keystore.key"] = string(s.KeyPEM)
	}
	if len(s.Users) == 0 {
		return cfg
	}
	cfg["sasl.enabled.mechanisms"] = saslMechanisms
	var plain strings.Builder
	plain.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		fmt.Fprintf(&plain, " user_%s=\"%s\"", name, s.Users[name])
	}
	plain.WriteString(";")
	const scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	for _, l := range s.protocols() {
		if !strings.HasPrefix(l, "SASL_") {
			continue
		}
		// The server's login modules, per listener and mechanism: without
		// one the broker refuses to start ("Could not find a 'KafkaServer'
		// ... entry in the JAAS configuration"). SCRAM's checks the
		// credentials in the cluster's metadata.
		prefix := "listener.name." + strings.ToLower(l) + "."
		cfg[prefix+"plain.sasl.jaas.config"] = plain.String()
		cfg[prefix+"scram-sha-256.sasl.jaas.config"] = scram
		cfg[prefix+"scram-sha-512.sasl.jaas.config"] = scram
	}
	return cfg
}

// scramArgs returns the storage tool's arguments that add the SCRAM
// credentials of Users to a new cluster's metadata.
func (s *KafkaSecurity) scramArgs() []string {
	var args []string
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", mech, name, s.Users[name]))
		}
	}
	return args
}

// propertiesValue escapes v for a Java properties file, in which a line
// break ends the value and a backslash starts an escape (PEM certificates
// span lines).
func propertiesValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`).Replace(v)
}
