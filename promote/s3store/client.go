package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// Scheme starts the location of an S3 store and of its publications:
// s3://bucket/prefix.
const Scheme = "s3://"

// DefaultRequestTimeout bounds one request to S3 (with the SDK's retries),
// plus a second per MiB it moves.
const DefaultRequestTimeout = 30 * time.Second

// bytesPerSecond is the slowest transfer a request's timeout allows for.
const bytesPerSecond = 1 << 20

// NewClient returns an S3 client configured the way the AWS CLI and SDKs
// are, from the environment and the shared files (~/.aws/config,
// ~/.aws/credentials):
//
//   - credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
//     AWS_SESSION_TOKEN, or AWS_PROFILE and the SDK's other providers;
//   - region: AWS_REGION or AWS_DEFAULT_REGION (us-east-1 when neither is
//     set and the endpoint is not AWS's);
//   - endpoint: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, for a server
//     other than AWS (MinIO, R2, moto...), addressed path-style
//     (endpoint/bucket/key).
//
// optFns (config.WithBaseEndpoint, config.WithRegion...) override the
// environment. Requests go through a transport of the client's own, with
// connect, TLS and response-header timeouts, trusting AWS_CA_BUNDLE's
// roots when it is set; Store.Close and Reader.Close release its idle
// connections.
func NewClient(ctx context.Context, optFns ...func(*config.LoadOptions) error) (*s3.Client, error) {
	// A BuildableClient, which the SDK can give AWS_CA_BUNDLE's roots.
	bc := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout, d.KeepAlive = 10*time.Second, 30*time.Second }).
		WithTransportOptions(func(tr *http.Transport) {
			tr.TLSHandshakeTimeout = 10 * time.Second
			tr.ResponseHeaderTimeout = 30 * time.Second
		})
	opts := append([]func(*config.LoadOptions) error{config.WithHTTPClient(bc)}, optFns...)
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3store: AWS configuration: %w", err)
	}
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		// Its transport, in a client of ours, whose idle connections
		// Close can release. Redirects are not followed, as the SDK's own
		// client does not.
		cfg.HTTPClient = &http.Client{
			Transport:     bc.GetTransport(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// Not the SDK's lines on stderr, which is the worker's log: an
		// error says what went wrong.
		o.Logger, o.DisableLogOutputChecksumValidationSkipped = logging.Nop{}, true
		if o.BaseEndpoint != nil && *o.BaseEndpoint != "" {
			o.UsePathStyle = true
			if o.Region == "" {
				o.Region = "us-east-1"
			}
		}
	})
	if c.Options().Region == "" {
		return nil, errors.New("s3store: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), or AWS_ENDPOINT_URL_S3 for a server other than AWS")
	}
	return c, nil
}

// closeIdle closes the idle connections of client's transport.
func closeIdle(client *s3.Client) {
	if c, ok := client.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// describe says where client sends its requests, for error messages.
func describe(client *s3.Client) string {
	o := client.Options()
	where := "AWS S3"
	if o.BaseEndpoint != nil && *o.BaseEndpoint != "" {
		where = *o.BaseEndpoint
	}
	return where + ", region " + o.Region
}

// ParseURL splits s3://bucket/prefix into the bucket and the key prefix
// (without leading or trailing slashes; "" for the whole bucket). The
// prefix is taken as it is, not URL-decoded: it is a key prefix, and the
// run and task ids of Where may hold any character ('?', '#', '%'...).
func ParseURL(location string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(location, Scheme)
	if !ok {
		return "", "", fmt.Errorf("%q: want s3://bucket/prefix", location)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if !validBucket(bucket) {
		return "", "", fmt.Errorf("%q: %q is not a bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, with no user, port or query (the endpoint comes from AWS_ENDPOINT_URL_S3)", location, bucket)
	}
	if !utf8.ValidString(prefix) || strings.ContainsRune(prefix, 0) {
		return "", "", fmt.Errorf("%q: the prefix is not valid UTF-8 without NUL", location)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		for _, seg := range strings.Split(prefix, "/") {
			if seg == "" || seg == "." || seg == ".." {
				return "", "", fmt.Errorf("%q: the prefix may not hold empty, . or .. segments", location)
			}
		}
	}
	return bucket, prefix, nil
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i, r := range b {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (r != '.' && r != '-' || i == 0 || i == len(b)-1) {
			return false
		}
	}
	return true
}

// timeout is the bound of a request moving n bytes.
func timeout(base time.Duration, n int64) time.Duration {
	if base <= 0 {
		base = DefaultRequestTimeout
	}
	return base + time.Duration(n/bytesPerSecond)*time.Second
}

// errTooLarge is an object larger than a read allows.
var errTooLarge = errors.New("larger than allowed")

// errExists is a conditional write refused because the object exists.
var errExists = errors.New("object exists")

// putIfAbsent writes an object unless one exists under key: errExists
// then. A conflicting concurrent conditional write (409) is retried a
// few times.
func putIfAbsent(ctx context.Context, client *s3.Client, base time.Duration, bucket, key string, data []byte, contentType string, meta map[string]string) error {
	var err error
	for try := 0; try < 4; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(50<<try) * time.Millisecond):
			}
		}
		rctx, cancel := context.WithTimeout(ctx, timeout(base, int64(len(data))))
		_, err = client.PutObject(rctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))), ContentType: aws.String(contentType),
			IfNoneMatch: aws.String("*"), Metadata: meta,
		})
		cancel()
		switch code := errorCode(err); {
		case err == nil:
			return nil
		case httpStatus(err) == http.StatusPreconditionFailed || code == "PreconditionFailed":
			return errExists
		case code == "ConditionalRequestConflict":
			continue
		}
		break
	}
	return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
}

// getBounded reads an object of at most max bytes. A missing object is an
// error matching fs.ErrNotExist; a larger one, an error.
func getBounded(ctx context.Context, client *s3.Client, base time.Duration, bucket, key string, max int64) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout(base, max))
	defer cancel()
	out, err := client.GetObject(rctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	var nsk *types.NoSuchKey
	if errors.As(err, &nsk) {
		return nil, fmt.Errorf("s3://%s/%s: %w", bucket, key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength > max {
		return nil, fmt.Errorf("s3://%s/%s: %d bytes: %w (%d)", bucket, key, *out.ContentLength, errTooLarge, max)
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("s3://%s/%s: %w (%d bytes)", bucket, key, errTooLarge, max)
	}
	return b, nil
}

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// Reader reads the files of publications back from where a Store said it
// put them (Store.Where): s3://bucket/prefix/run_id/task_id/. It
// implements promote.Reader.
type Reader struct {
	client *s3.Client
	// RequestTimeout bounds each request, plus a second per MiB read
	// (DefaultRequestTimeout when 0).
	RequestTimeout time.Duration
}

// NewReader returns a Reader that reads through client (see NewClient).
func NewReader(client *s3.Client) *Reader { return &Reader{client: client} }

// ReadFile reads the file name of the publication at where, at most max
// bytes: a larger object is an error, and a missing one (or a missing
// manifest: an unpublished run) an error matching fs.ErrNotExist.
func (r *Reader) ReadFile(ctx context.Context, where, name string, max int64) ([]byte, error) {
	bucket, prefix, err := ParseURL(where)
	if err != nil {
		return nil, err
	}
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("s3store: %q is not a file name of a publication", name)
	}
	return getBounded(ctx, r.client, r.RequestTimeout, bucket, path.Join(prefix, name), max)
}

// Close releases the idle connections of the Reader's client.
func (r *Reader) Close() { closeIdle(r.client) }
