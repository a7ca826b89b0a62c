// Package dirwatch tells the server when the content of a policy directory
// changed, however the directory is delivered in Kubernetes: a ConfigMap
// volume (files are symlinks through "..data", which kubelet swaps
// atomically), a git-sync checkout (the configured path is a symlink swapped
// to a new worktree on every sync), or a plain directory edited in place.
//
// Events only say "look again"; the decision to reload is always taken by
// comparing content fingerprints, so a swap that delivers the same files, a
// touch, or an editor's temporary file never reloads the policy set.
package dirwatch
