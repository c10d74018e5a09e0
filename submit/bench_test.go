package submit

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/locateanything/detect/jobs"
	"github.com/locateanything/detect/jobs/natsembed/natstest"
)

// BenchmarkPublish measures how many jobs a second reach LA_JOBS (file storage, embedded
// server) with 1 and with 64 publishes awaiting their acknowledgement.
func BenchmarkPublish(b *testing.B) {
	for _, inFlight := range []int{1, 64} {
		b.Run(fmt.Sprintf("in-flight=%d", inFlight), func(b *testing.B) {
			srv := natstest.Start(b)
			js, err := jetstream.New(natstest.Connect(b, srv))
			if err != nil {
				b.Fatal(err)
			}
			_, err = js.CreateStream(b.Context(), jetstream.StreamConfig{
				Name: jobs.JobsStream, Subjects: []string{jobs.JobSubjectPrefix + ">"},
				Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: time.Minute,
			})
			if err != nil {
				b.Fatal(err)
			}
			pub := &publisher{js: js, class: jobs.DefaultClass, backoff: DefaultBackoff}
			work := make(chan *jobs.Job)
			var wg sync.WaitGroup
			for range inFlight {
				wg.Go(func() {
					for j := range work {
						if _, err := pub.publish(b.Context(), j); err != nil {
							b.Error(err)
						}
					}
				})
			}
			b.ResetTimer()
			for i := range b.N {
				work <- &jobs.Job{ID: JobID(fmt.Sprint("sha256:", i), JobParams{Query: "q"}), Image: "s3://frames/cam04/000123.jpg", Query: "person</c>car"}
			}
			close(work)
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
