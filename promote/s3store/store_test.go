package s3store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/s3test"
	"github.com/airlock-run/airlock/promote/s3store"
	"github.com/airlock-run/airlock/record"
)

// crashEnv names, in a child test process, the endpoint to publish to and
// die on the way (TestPublishKilledBeforeManifest).
const crashEnv = "S3STORE_TEST_CRASH_ENDPOINT"

func TestMain(m *testing.M) {
	if ep := os.Getenv(crashEnv); ep != "" {
		crashChild(ep)
		return
	}
	goleak.VerifyTestMain(m)
}

const bucket = "airlock-test"

// world is a moto server with a bucket, and a store on it.
type world struct {
	srv    *s3test.Server
	client *s3.Client
	store  *s3store.Store
}

func newWorld(t *testing.T, prefix string) *world {
	t.Helper()
	srv := s3test.Start(t)
	srv.Bucket(t, bucket)
	c := srv.Client(t)
	return &world{srv: srv, client: c, store: s3store.New(c, bucket, prefix)}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// manifest and files of a publication of approval id for run/task, as the
// Promoter makes them.
func publication(run, task, id, result string) (*approve.Manifest, map[string][]byte) {
	files := map[string][]byte{
		approve.ResultName: []byte(result),
		"out/a.csv":        []byte("x,y\n1,2\n"),
		"out/sub/b.txt":    []byte("hello " + id + "\n"),
	}
	m := &approve.Manifest{RunID: run, TaskID: task, ApprovalID: id, AcceptedBy: "alice", Reasons: []string{"ok"},
		Result:    &record.Artifact{Name: approve.ResultName, Bytes: int64(len(result)), SHA256: sum([]byte(result)), ContentType: "application/json"},
		Artifacts: []record.Artifact{}, PromotedAt: time.Now().UTC(), PromotedBy: "test"}
	for _, n := range []string{"out/a.csv", "out/sub/b.txt"} {
		m.Artifacts = append(m.Artifacts, record.Artifact{Name: n, Bytes: int64(len(files[n])), SHA256: sum(files[n]), ContentType: "text/plain"})
	}
	return m, files
}

// objects lists what the bucket holds under prefix, with its bytes.
func (w *world) objects(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out, err := w.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, o := range out.Contents {
		r, err := w.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimPrefix(*o.Key, prefix)] = b
	}
	return got
}

// TestConditionalWrites: the server honours If-None-Match: * on
// PutObject, which exactly once rests on. A server that ignores it fails
// here (it is not a skip).
func TestConditionalWrites(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	ctx := context.Background()
	put := func(body string) error {
		_, err := w.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"),
			Body: strings.NewReader(body), IfNoneMatch: aws.String("*")})
		return err
	}
	if err := put("first"); err != nil {
		t.Fatal(err)
	}
	err := put("second")
	if err == nil || !strings.Contains(err.Error(), "412") {
		t.Fatalf("a second conditional put: %v; want 412 Precondition Failed", err)
	}
	if got := w.objects(t, ""); string(got["k"]) != "first" {
		t.Fatalf("the object holds %q", got["k"])
	}
}

func TestPublishOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "team/outputs/")
	ctx := context.Background()
	m, files := publication("run-1", "task-1", "ap-1", `{"total": 42}`)
	if got := w.store.Where("run-1", "task-1"); got != "s3://"+bucket+"/team/outputs/run-1/task-1/" {
		t.Errorf("Where = %s", got)
	}
	if pub, err := w.store.Publish(ctx, m, files); err != nil || !pub {
		t.Fatalf("publish: published=%v err=%v", pub, err)
	}
	got := w.objects(t, "team/outputs/run-1/task-1/")
	var man approve.Manifest
	if err := json.Unmarshal(got["manifest.json"], &man); err != nil {
		t.Fatal(err)
	}
	delete(got, "manifest.json")
	if diff := cmp.Diff(files, got); diff != "" {
		t.Errorf("published objects (-want +got):\n%s", diff)
	}
	if man.ApprovalID != "ap-1" || man.RunID != "run-1" || man.TaskID != "task-1" || man.Result.SHA256 != sum(files[approve.ResultName]) || len(man.Artifacts) != 2 {
		t.Errorf("manifest: %+v", man)
	}
	head, err := w.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("team/outputs/run-1/task-1/out/a.csv")})
	if err != nil || aws.ToString(head.ContentType) != "text/plain" || head.Metadata[s3store.MetaApproval] != "ap-1" || head.Metadata[s3store.MetaSHA256] != sum(files["out/a.csv"]) {
		t.Errorf("object head: %+v %v", head, err)
	}

	// A retried promotion (a crash after the publication, before the
	// approval was marked) changes nothing.
	before := w.objects(t, "team/outputs/")
	m2, files2 := publication("run-1", "task-1", "ap-1", `{"total": 42}`)
	m2.PromotedAt = m.PromotedAt.Add(time.Minute)
	if pub, err := w.store.Publish(ctx, m2, files2); err != nil || pub {
		t.Fatalf("second publish: published=%v err=%v", pub, err)
	}
	// The same task from another approval: refused, the first stays.
	m3, files3 := publication("run-1", "task-1", "ap-2", `{"total": 43}`)
	if _, err := w.store.Publish(ctx, m3, files3); !errors.Is(err, approve.ErrConflict) {
		t.Fatalf("another approval: want ErrConflict, got %v", err)
	}
	if diff := cmp.Diff(before, w.objects(t, "team/outputs/")); diff != "" {
		t.Errorf("the store changed (-before +after):\n%s", diff)
	}

	// Read back as a client does.
	r := s3store.NewReader(w.client)
	where := w.store.Where("run-1", "task-1")
	if b, err := r.ReadFile(ctx, where, "manifest.json", s3store.MaxManifest); err != nil || !strings.Contains(string(b), `"approval_id": "ap-1"`) {
		t.Errorf("read manifest: %s %v", b, err)
	}
	if b, err := r.ReadFile(ctx, where, approve.ResultName, 1<<20); err != nil || string(b) != `{"total": 42}` {
		t.Errorf("read result: %s %v", b, err)
	}
	if _, err := r.ReadFile(ctx, where, approve.ResultName, 5); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a read past its bound: %v", err)
	}
	if _, err := r.ReadFile(ctx, w.store.Where("run-1", "no-task"), "manifest.json", s3store.MaxManifest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("manifest of an unpublished task: %v", err)
	}
	for _, bad := range []string{"../x", "/etc/x", ""} {
		if _, err := r.ReadFile(ctx, where, bad, 10); err == nil {
			t.Errorf("ReadFile %q: no error", bad)
		}
	}
}

// TestPublishRefusesBadNames: what promote.FS refuses, the store refuses,
// before writing anything.
func TestPublishRefusesBadNames(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	ctx := context.Background()
	for _, bad := range []string{"../x", "/etc/x", "manifest.json"} {
		m := &approve.Manifest{RunID: "r2", TaskID: "t", ApprovalID: "a"}
		if _, err := w.store.Publish(ctx, m, map[string][]byte{"ok.txt": nil, bad: nil}); err == nil {
			t.Errorf("artifact %q was accepted", bad)
		}
	}
	for _, m := range []approve.Manifest{
		{RunID: "r", TaskID: "", ApprovalID: "a3"}, {RunID: "r", TaskID: "../t", ApprovalID: "a3"},
		{RunID: ".staging", TaskID: "t", ApprovalID: "a3"}, {RunID: "r", TaskID: "t3", ApprovalID: "../a3"},
		{RunID: "r/x", TaskID: "t", ApprovalID: "a3"},
	} {
		if _, err := w.store.Publish(ctx, &m, nil); err == nil {
			t.Errorf("manifest %+v was published", m)
		}
	}
	if got := w.objects(t, ""); len(got) != 0 {
		t.Errorf("refused publications wrote %d objects", len(got))
	}
}

// TestTasksOfOneRun: several tasks of one run all publish, each under its
// own name; one that reuses the run_id neither blocks nor overwrites
// another's publication.
func TestTasksOfOneRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "p")
	ctx := context.Background()
	for _, task := range []string{"extract", "transform", "intruder"} {
		m := &approve.Manifest{RunID: "agent-run-7", TaskID: task, ApprovalID: "ap-" + task}
		if pub, err := w.store.Publish(ctx, m, map[string][]byte{"result.json": []byte(`"` + task + `"`)}); err != nil || !pub {
			t.Fatalf("%s: published=%v err=%v", task, pub, err)
		}
	}
	got := w.objects(t, "p/agent-run-7/")
	for _, task := range []string{"extract", "transform", "intruder"} {
		if b := got[task+"/result.json"]; string(b) != `"`+task+`"` {
			t.Errorf("%s: %q", task, b)
		}
	}
}

// TestOddIDs: run and task ids may hold characters that mean something
// in a URL; Where and a Reader take them as they are.
func TestOddIDs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "p q")
	ctx := context.Background()
	m := &approve.Manifest{RunID: "run ?x=1#y%20", TaskID: "task+é&", ApprovalID: "ap-odd"}
	if pub, err := w.store.Publish(ctx, m, map[string][]byte{"result.json": []byte("7"), "a b/c?d.txt": []byte("8")}); err != nil || !pub {
		t.Fatalf("published=%v err=%v", pub, err)
	}
	where := w.store.Where(m.RunID, m.TaskID)
	if where != "s3://"+bucket+"/p q/run ?x=1#y%20/task+é&/" {
		t.Errorf("Where = %q", where)
	}
	r := s3store.NewReader(w.client)
	for name, want := range map[string]string{"result.json": "7", "a b/c?d.txt": "8"} {
		if b, err := r.ReadFile(ctx, where, name, 10); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
	if got := w.objects(t, "p q/run ?x=1#y%20/task+é&/"); len(got) != 3 {
		t.Errorf("objects: %q", keys(got))
	}
}

// TestConcurrentPublishers: publishers of one task race; exactly one
// publishes, and the publication is whole: every object its manifest
// names holds the bytes the manifest says.
func TestConcurrentPublishers(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "race")
	ctx := context.Background()
	const n = 6
	for round := 0; round < 5; round++ {
		for _, sameApproval := range []bool{false, true} {
			task := fmt.Sprintf("task-%d-%v", round, sameApproval)
			results := make([]error, n)
			published := make([]bool, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < n; i++ {
				id := fmt.Sprintf("ap-%d", i)
				if sameApproval {
					id = "ap-same"
				}
				m, files := publication("run", task, id, fmt.Sprintf(`{"by": %q}`, id))
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					published[i], results[i] = w.store.Publish(ctx, m, files)
				}()
			}
			close(start)
			wg.Wait()
			winners := 0
			for i := 0; i < n; i++ {
				switch err := results[i]; {
				case published[i]:
					winners++
				case sameApproval && err != nil:
					t.Errorf("%s: publisher %d of the same approval: %v", task, i, err)
				case !sameApproval && !errors.Is(err, approve.ErrConflict):
					t.Errorf("%s: loser %d: want ErrConflict, got %v", task, i, err)
				}
			}
			if winners != 1 {
				t.Errorf("%s: %d publishers published, want exactly 1 (%v)", task, winners, results)
			}
			checkWhole(t, w, "race/run/"+task+"/")
		}
	}
}

// checkWhole checks that the objects the manifest at dir names hold what
// it says.
func checkWhole(t *testing.T, w *world, dir string) {
	t.Helper()
	got := w.objects(t, dir)
	var man approve.Manifest
	if err := json.Unmarshal(got["manifest.json"], &man); err != nil {
		t.Fatalf("%s: manifest: %v", dir, err)
	}
	arts := append([]record.Artifact{*man.Result}, man.Artifacts...)
	for _, a := range arts {
		if sum(got[a.Name]) != a.SHA256 {
			t.Errorf("%s%s does not hold what the manifest of %s says", dir, a.Name, man.ApprovalID)
		}
	}
}

// cutAt is a transport that calls at(req) before sending a PUT of a
// manifest, and sends nothing when it returns an error.
type cutAt struct {
	at func(*http.Request) error
}

func (c cutAt) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.HasSuffix(req.URL.Path, "/manifest.json") {
		if err := c.at(req); err != nil {
			return nil, err
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

// clientVia is a client of srv whose requests go through rt.
func clientVia(srv *s3test.Server, rt http.RoundTripper) (*s3.Client, error) {
	c, err := s3store.NewClient(context.Background(),
		config.WithBaseEndpoint(srv.Endpoint), config.WithRegion(s3test.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(s3test.AccessKey, s3test.SecretKey, "")))
	if err != nil {
		return nil, err
	}
	return s3.New(srv.Pin(c).Options(), func(o *s3.Options) {
		o.HTTPClient, o.RetryMaxAttempts = &http.Client{Transport: rt}, 1
	}), nil
}

// TestPublishCancelledBeforeManifest: a publication cut off between its
// files and its manifest is not published: readers find no manifest; the
// retry publishes it, once.
func TestPublishCancelledBeforeManifest(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := clientVia(w.srv, cutAt{at: func(*http.Request) error { cancel(); return context.Canceled }})
	if err != nil {
		t.Fatal(err)
	}
	m, files := publication("run-c", "task-c", "ap-c", `{"n": 1}`)
	if pub, err := s3store.New(c, bucket, "").Publish(ctx, m, files); err == nil || pub {
		t.Fatalf("a cancelled publish: published=%v err=%v", pub, err)
	}
	checkUnpublished(t, w, m, files)
}

// TestPublishKilledBeforeManifest: the same when the publishing process
// is killed (SIGKILL) between its files and its manifest.
func TestPublishKilledBeforeManifest(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+w.srv.Endpoint)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("the publisher was not killed: %v\n%s", err, out)
	}
	m, files := publication("run-k", "task-k", "ap-k", `{"n": 2}`)
	checkUnpublished(t, w, m, files)
}

// crashChild publishes run-k and is killed when about to write its
// manifest.
func crashChild(endpoint string) {
	c, err := clientVia(&s3test.Server{Endpoint: endpoint}, cutAt{at: func(*http.Request) error {
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill()
		time.Sleep(time.Minute)
		return errors.New("not killed")
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	m, files := publication("run-k", "task-k", "ap-k", `{"n": 2}`)
	pub, err := s3store.New(c, bucket, "").Publish(context.Background(), m, files)
	fmt.Fprintf(os.Stderr, "published=%v err=%v\n", pub, err)
	os.Exit(3)
}

// checkUnpublished: the files of an interrupted publication are there,
// its manifest is not, and readers see it unpublished; the retry of its
// approval publishes it once, while another approval is refused.
func checkUnpublished(t *testing.T, w *world, m *approve.Manifest, files map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	dir := m.RunID + "/" + m.TaskID + "/"
	got := w.objects(t, dir)
	if _, ok := got["manifest.json"]; ok {
		t.Fatal("the manifest was written")
	}
	if diff := cmp.Diff(files, got); diff != "" {
		t.Errorf("the files before the manifest (-want +got):\n%s", diff)
	}
	where := w.store.Where(m.RunID, m.TaskID)
	if _, err := s3store.NewReader(w.client).ReadFile(ctx, where, "manifest.json", s3store.MaxManifest); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a reader found a manifest: %v", err)
	}
	other, otherFiles := publication(m.RunID, m.TaskID, "ap-other", `{"other": true}`)
	if _, err := w.store.Publish(ctx, other, otherFiles); !errors.Is(err, approve.ErrConflict) {
		t.Errorf("another approval over an interrupted publication: want ErrConflict, got %v", err)
	}
	if pub, err := w.store.Publish(ctx, m, files); err != nil || !pub {
		t.Fatalf("the retry: published=%v err=%v", pub, err)
	}
	if pub, err := w.store.Publish(ctx, m, files); err != nil || pub {
		t.Fatalf("a second retry: published=%v err=%v", pub, err)
	}
	checkWhole(t, w, dir)
	if _, err := s3store.NewReader(w.client).ReadFile(ctx, where, "manifest.json", s3store.MaxManifest); err != nil {
		t.Errorf("reading the manifest after the retry: %v", err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	ctx := context.Background()
	if err := w.store.Check(ctx); err != nil {
		t.Fatal(err)
	}
	err := s3store.New(w.client, "no-such-bucket", "").Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "no-such-bucket") || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL_S3") {
		t.Errorf("Check of a missing bucket: %v", err)
	}
}

// TestNewClientFromEnv: the endpoint, region and credentials come from
// the usual AWS variables, and a custom endpoint is addressed path-style.
func TestNewClientFromEnv(t *testing.T) {
	w := newWorld(t, "")
	ctx := context.Background()
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")

	// No region, no endpoint: AWS needs a region.
	if _, err := s3store.NewClient(ctx); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Errorf("no region: %v", err)
	}
	t.Setenv("AWS_DEFAULT_REGION", "eu-west-3")
	c, err := s3store.NewClient(ctx)
	if err != nil || c.Options().Region != "eu-west-3" || c.Options().UsePathStyle {
		t.Errorf("AWS_DEFAULT_REGION: %v %+v", err, c.Options())
	}
	// AWS_ENDPOINT_URL, then AWS_ENDPOINT_URL_S3 which wins.
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	c, err = s3store.NewClient(ctx)
	if err != nil || aws.ToString(c.Options().BaseEndpoint) != "http://127.0.0.1:1" || !c.Options().UsePathStyle {
		t.Errorf("AWS_ENDPOINT_URL: %v %+v", err, c.Options())
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", w.srv.Endpoint)
	t.Setenv("AWS_REGION", "us-west-2")
	c, err = s3store.NewClient(ctx)
	if err != nil || aws.ToString(c.Options().BaseEndpoint) != w.srv.Endpoint || c.Options().Region != "us-west-2" {
		t.Fatalf("AWS_ENDPOINT_URL_S3: %v %+v", err, c.Options())
	}
	s := s3store.New(c, bucket, "env")
	defer s.Close()
	if pub, err := s.Publish(ctx, &approve.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a"}, map[string][]byte{"result.json": []byte("1")}); err != nil || !pub {
		t.Fatalf("publish through the environment's client: %v %v", pub, err)
	}
	if got := w.objects(t, "env/r/t/"); string(got["result.json"]) != "1" || len(got) != 2 {
		t.Errorf("objects: %q", keys(got))
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestParseURL(t *testing.T) {
	for in, want := range map[string][2]string{
		"s3://bkt":              {"bkt", ""},
		"s3://bkt/":             {"bkt", ""},
		"s3://my.bucket-1/a/b/": {"my.bucket-1", "a/b"},
		"s3://bkt/airlock":      {"bkt", "airlock"},
		"s3://bkt/a b/r?x#y%20": {"bkt", "a b/r?x#y%20"},
	} {
		b, p, err := s3store.ParseURL(in)
		if err != nil || b != want[0] || p != want[1] {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %q", in, b, p, err, want)
		}
	}
	for _, bad := range []string{"", "bkt/x", "s3://", "s3://b", "s3://Bkt/x", "s3://bkt:9000/x", "s3://u@bkt/x", "s3://bkt/a//b",
		"s3://bkt/../x", "s3://bkt?x", "s3://-bkt/x", "http://bkt/x", "s3://bkt/\xff"} {
		if b, p, err := s3store.ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) = %q, %q; want an error", bad, b, p)
		}
	}
}

// TestCABundle: AWS_CA_BUNDLE's roots are trusted for an endpoint's TLS
// certificate (here a stand-in TLS server answering HeadBucket, for the
// certificate only), and without them the certificate is refused.
func TestCABundle(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	ts.StartTLS()
	defer ts.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(bundle, pemCert, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ENDPOINT_URL_S3", ts.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx := context.Background()
	for _, tc := range []struct {
		bundle string
		ok     bool
	}{{bundle, true}, {"", false}} {
		t.Setenv("AWS_CA_BUNDLE", tc.bundle)
		c, err := s3store.NewClient(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := s3store.New(c, bucket, "")
		err = s.Check(ctx)
		s.Close()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "certificate")) {
			t.Errorf("AWS_CA_BUNDLE=%q: Check: %v", tc.bundle, err)
		}
	}
}
