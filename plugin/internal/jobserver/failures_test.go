package jobserver

import (
	"github.com/couchepi/couchepi/plugin/internal/jobdata"
	"github.com/couchepi/couchepi/plugin/replicate"
)

// The job record keeps a run's refused docs as the engine reports them:
// the two FailedDoc are one type, tags included (a conversion of Stats
// would ignore tags), so what is stored is what the engine names.
var _ jobdata.FailedDoc = replicate.FailedDoc{}
