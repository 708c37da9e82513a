package search_test

import (
	"context"
	"fmt"

	"github.com/graphorin/graphorin-go/services/registry/internal/search"
)

func Example() {
	ix := search.NewIndex([]search.Doc{
		{Name: "fs.read_file", Description: "Read a file from disk", Tags: []string{"fs"}, Available: true},
		{Name: "fs.write_file", Description: "Write bytes to a file", Tags: []string{"fs"}, Available: true},
		{Name: "img.resize", Description: "Scale a picture", ExampleComments: []string{"resize an image to a width"}},
		{Name: "img.thumbnail", Description: "Make a small preview", Tags: []string{"images"}, Available: true},
	}, search.Options{})

	for _, q := range []string{"read a file", "image"} {
		fmt.Printf("%q:\n", q)
		for _, m := range ix.Search(context.Background(), q, 5) {
			fmt.Printf("  %-14s %.3f %s\n", m.Name, m.Score, m.Source)
		}
	}
	// "image": BM25 finds img.resize through its example comment; the
	// substring stage adds img.thumbnail through its tag "images". No
	// live worker hosts img.resize, so it is listed after img.thumbnail.

	// Output:
	// "read a file":
	//   fs.read_file   1.000 bm25
	//   fs.write_file  0.365 bm25
	// "image":
	//   img.thumbnail  0.500 regex-name
	//   img.resize     1.000 bm25
}
