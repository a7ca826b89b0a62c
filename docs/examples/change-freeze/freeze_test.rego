package example.freeze_test

import data.example.freeze

params := {
	"freezes": [{"name": "year-end", "start": "2026-12-21T00:00:00Z", "end": "2027-01-04T00:00:00Z", "reason": "the year-end change freeze"}],
	"weekly": {"day": "Friday", "fromHourUTC": 15},
	"breakGlassGroups": ["qn:incident-responders"],
}

request(t, groups) := {"context": {"role": "default", "time": t, "operation": "UPDATE", "name": "edge-1", "groups": groups}}

test_inside_the_dated_window_is_denied if {
	count(freeze.deny) == 1 with input as request("2026-12-24T10:00:00Z", ["system:authenticated"])
		with data.roles.default as params
}

test_the_window_ends_exclusive if {
	count(freeze.deny) == 0 with input as request("2027-01-04T00:00:00Z", ["system:authenticated"])
		with data.roles.default as params
}

test_the_window_starts_inclusive if {
	count(freeze.deny) == 1 with input as request("2026-12-21T00:00:00Z", ["system:authenticated"])
		with data.roles.default as params
}

test_friday_afternoon_is_frozen_and_friday_morning_is_not if {
	# 2026-03-06 is a Friday.
	count(freeze.deny) == 1 with input as request("2026-03-06T15:00:00Z", ["system:authenticated"])
		with data.roles.default as params
	count(freeze.deny) == 0 with input as request("2026-03-06T14:59:59Z", ["system:authenticated"])
		with data.roles.default as params
}

test_a_zone_offset_is_honoured if {
	# 16:30 in UTC+02:00 is 14:30 UTC: before the weekly freeze.
	count(freeze.deny) == 0 with input as request("2026-03-06T16:30:00+02:00", ["system:authenticated"])
		with data.roles.default as params
}

test_break_glass_is_warned_not_denied if {
	count(freeze.deny) == 0 with input as request("2026-12-24T10:00:00Z", ["qn:incident-responders"])
		with data.roles.default as params
	count(freeze.warn) == 1 with input as request("2026-12-24T10:00:00Z", ["qn:incident-responders"])
		with data.roles.default as params
}
