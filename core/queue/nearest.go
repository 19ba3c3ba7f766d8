package queue

import (
	"slices"
	"strings"
)

// nearestURNs returns up to n registered URNs closest to urn by edit
// distance, nearest first, leaving out any that differ in more than a fifth
// of their characters (at least 2): the hint a typo in a URN needs.
func nearestURNs(urn string, handlers map[string]HandlerFunc, n int) []string {
	type scored struct {
		urn  string
		dist int
	}
	var all []scored
	for h := range handlers {
		d := editDistance(strings.ToLower(urn), strings.ToLower(h))
		if d <= max(2, max(len(urn), len(h))/5) {
			all = append(all, scored{h, d})
		}
	}
	slices.SortFunc(all, func(a, b scored) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return strings.Compare(a.urn, b.urn)
	})
	out := make([]string, 0, min(n, len(all)))
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, all[i].urn)
	}
	return out
}

// editDistance is the Levenshtein distance between a and b in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
