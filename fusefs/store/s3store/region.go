package s3store

import (
	"fmt"
	"regexp"

	"github.com/minio/minio-go/v7"
)

// expectingRegion finds the region in S3's "the region 'us-east-1' is
// wrong; expecting 'eu-west-1'" when the answer has no Region element.
var expectingRegion = regexp.MustCompile(`expecting '([a-z0-9-]+)'`)

// ExplainRegion says which region to configure when err is S3 refusing a
// request signed for another region than the bucket's; ok is false for
// any other error. A bucket outside us-east-1 with no region parameter
// is the usual cause, and S3's own words do not say where the fix goes.
func ExplainRegion(err error) (msg string, ok bool) {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint", "AuthorizationQueryParametersError":
	default:
		return "", false
	}
	region := resp.Region
	if region == "" {
		if m := expectingRegion.FindStringSubmatch(resp.Message); m != nil {
			region = m[1]
		}
	}
	if region == "" {
		return "", false
	}
	return fmt.Sprintf("the bucket's region is %s, which requests must be signed for (%s): set the StorageClass parameter \"region\" (objfuse-mount: --region) to %s",
		region, resp.Code, region), true
}
