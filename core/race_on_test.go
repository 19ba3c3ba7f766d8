//go:build race

package core_test

// raceEnabled reports a -race build, whose runtime allocates on its own and
// makes allocation counts meaningless.
const raceEnabled = true
