package chsink_test

import (
	"fmt"

	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

func ExampleSelectFinal() {
	fmt.Println(chsink.SelectFinal("analytics", "deployments", []string{"org_id", "window_end", "count"}, "org_id = 7"))
	// Output: SELECT `org_id`, `window_end`, `count` FROM `analytics`.`deployments` FINAL WHERE org_id = 7
}

func ExampleSelectLatest() {
	fmt.Println(chsink.SelectLatest("analytics", "deployments", []string{"org_id", "window_end"}, "version", []string{"count"}))
	// Output: SELECT `org_id`, `window_end`, argMax(`count`, `version`) AS `count` FROM `analytics`.`deployments` GROUP BY `org_id`, `window_end`
}
