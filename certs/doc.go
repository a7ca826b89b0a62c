// Package certs owns the webhook's serving certificate: it loads the pair
// that cert-manager (or a person) mounts, swaps in rotated pairs without a
// restart, bootstraps a self-signed pair for local runs, and builds the
// server's tls.Config.
//
// There is one serving path: a self-signed bootstrap only writes files, which
// are then served by the same FileSource that serves a mounted Secret in a
// cluster. What is tested locally is what runs in production.
package certs
