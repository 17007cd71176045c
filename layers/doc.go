// Package layers holds the test that keeps the module's packages in their
// layers (docs/architecture.md): each top-level directory has a layer, and
// a package may import its own layer, the layers its layer is allowed, and
// the base packages. The table is in layers_test.go; a new top-level
// directory fails the test until it has a place there. standalone_test.go
// keeps the repository readable on its own: no tracked file names a
// document outside it, and markdown links lead to files inside it.
// citations_test.go keeps what comments and documents cite there: a
// section or item named after a document's path, or a link's anchor, is
// one the document has.
package layers
