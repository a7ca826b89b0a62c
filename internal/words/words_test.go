package words

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Count(0, "warning"), "0 warnings"},
		{Count(1, "warning"), "1 warning"},
		{Count(2, "warning"), "2 warnings"},
		{Count(1, "policy", "policies"), "1 policy"},
		{Count(3, "policy", "policies"), "3 policies"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
