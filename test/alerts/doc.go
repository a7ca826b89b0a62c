// Package alerts checks the chart's alerting rules with Prometheus' own
// rule parser and query engine: every expression parses, and each alert
// fires on the series that should fire it and stays quiet on the ones that
// should not. It is a module of its own so that Prometheus' dependencies
// stay out of qn-admission's go.mod. The rules come from the chart through
// test/alerts/testdata/rules.yaml, which test/chart keeps equal to what the
// chart renders.
package alerts
