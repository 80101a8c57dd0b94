// Package exactlyonce is a set of building blocks for event pipelines whose
// results stay exact when any step runs again or dies halfway.
//
// End-to-end exactly-once is at-least-once delivery plus idempotent,
// deterministic destinations. See README.md for the pipeline this SDK
// targets and the packages that make up each stage.
package exactlyonce
