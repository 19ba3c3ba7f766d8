//go:build race

package kafka

// raceEnabled reports a -race build, whose runtime allocates on its own and
// makes allocation counts meaningless.
const raceEnabled = true
