module github.com/couchepi/couchepi/test/kivik

go 1.26.0

require (
	github.com/couchepi/couchepi v0.0.0
	github.com/go-kivik/kivik/v4 v4.5.2
)

require (
	github.com/google/uuid v1.6.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
)

// A module of its own, so kivik stays out of couchepi's dependencies.
replace github.com/couchepi/couchepi => ../..
