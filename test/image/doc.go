// Package image tests the container images `make image` builds, the way a
// cluster will use them but without one: it reads the OCI layouts with
// nothing but the standard library (a second reader besides the
// go-containerregistry that wrote them), checks each image's config against
// what the Helm chart expects of it, unpacks the layers into a root
// filesystem and runs the binaries from there, chrooted, as the image's
// user, with nothing writable but /tmp. And it builds the images twice to
// hold them to the same digests.
//
// By default the tests build the images for this machine's architecture
// into a temporary directory. QN_IMAGE_LAYOUT=<dir> checks a directory
// `make image` wrote instead, every platform in it (make release-dry-run
// does this for linux/amd64 and linux/arm64); binaries of another
// architecture are checked but not run.
package image
