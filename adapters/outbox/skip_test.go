package outbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/moenda/moenda/adapters/topology"
)

func TestSkipUnroutable(t *testing.T) {
	for _, tt := range []struct {
		err, want error
	}{
		{fmt.Errorf("publish: %w", topology.ErrUnroutable), nil},
		{errors.New("broker down"), errors.New("broker down")},
		{nil, nil},
	} {
		h := skipUnroutable(watermill.NopLogger{})(func(*message.Message) ([]*message.Message, error) { return nil, tt.err })
		_, got := h(message.NewMessage("1", nil))
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("handler error %v became %v, want %v", tt.err, got, tt.want)
		}
	}
}
