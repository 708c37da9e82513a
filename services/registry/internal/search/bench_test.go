package search

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchVocab is the word list the synthetic corpus draws from: verbs,
// objects and qualifiers as tool descriptions use them.
var benchVocab = strings.Fields(`
	read write list create delete update fetch send resolve parse render
	convert compress extract upload download search index query scan sync
	watch notify schedule cancel retry validate sign verify encrypt decrypt
	file directory bucket object record row table column document image video
	audio message email invoice payment order customer user account token
	secret certificate key queue topic stream event metric log trace span
	alert incident ticket issue commit branch repository build deploy release
	container cluster node pod volume network route dns host port firewall
	remote local cloud storage database cache archive backup snapshot report
	chart dashboard calendar contact address location weather translation
	summary transcript thumbnail checksum schema manifest policy quota
	fast safe batch partial recursive streaming paginated cached signed
`)

var benchTags = strings.Fields(`fs net db auth billing media ops ci observability messaging geo ml`)

var benchComments = []string{
	"list every file in a directory",
	"resize an image to a width",
	"send a message to a user",
	"fetch the weather for a location",
	"rotate a secret before it expires",
	"",
}

// benchCorpus generates n tools deterministically: names like
// "svc17.compress_archive_42", descriptions of 6 to 17 vocabulary words
// with stopwords mixed in, one to three tags, up to two example comments,
// and about one tool in ten without a live worker.
func benchCorpus(n int) []Doc {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(list []string) string { return list[r.IntN(len(list))] }
	stop := []string{"the", "a", "to", "of", "for", "with", "and"}
	docs := make([]Doc, n)
	for i := range docs {
		var desc []string
		for range 6 + r.IntN(12) {
			if r.IntN(4) == 0 {
				desc = append(desc, pick(stop))
			}
			desc = append(desc, pick(benchVocab))
		}
		tags := make([]string, 1+r.IntN(3))
		for j := range tags {
			tags[j] = pick(benchTags)
		}
		var comments []string
		for range r.IntN(3) {
			comments = append(comments, pick(benchComments))
		}
		docs[i] = Doc{
			Name:            fmt.Sprintf("svc%d.%s_%s_%d", i%97, pick(benchVocab), pick(benchVocab), i),
			Description:     strings.Join(desc, " "),
			Tags:            tags,
			ExampleComments: comments,
			Available:       r.IntN(10) != 0,
		}
	}
	return docs
}

// benchQueries mixes short and long queries, common and rare words, a
// query that only the substring stage answers and one nothing answers.
var benchQueries = []string{
	"compress a file",
	"send an email to a customer",
	"list every pod in the cluster",
	"resize an image to a width",
	"fetch weather for location",
	"rotate the certificate secret key",
	"deploy release to cluster with retry",
	"query database table rows paginated",
	"download backup snapshot from cloud storage",
	"search",
	"svc17",
	"billing",
	"observ",
	"Stream events from a topic and notify on alert",
	"xyzzy",
	"the of and",
}

func BenchmarkSearch5000(b *testing.B) {
	ix := NewIndex(benchCorpus(5000), Options{})
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ix.Search(ctx, benchQueries[i%len(benchQueries)], 15)
		i++
	}
}

func BenchmarkNewIndex5000(b *testing.B) {
	docs := benchCorpus(5000)
	b.ReportAllocs()
	for b.Loop() {
		NewIndex(docs, Options{})
	}
}
