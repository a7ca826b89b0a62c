// Package words renders counts in messages people read: "1 warning",
// "2 warnings".
package words

import "strconv"

// Count is n and the noun, plural unless n is one. plural is the noun's
// plural when adding "s" is wrong ("policies"); omit it otherwise.
func Count(n int, noun string, plural ...string) string {
	if n == 1 {
		return "1 " + noun
	}
	if len(plural) > 0 {
		return strconv.Itoa(n) + " " + plural[0]
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
