// shard_impl.h — internal umbrella header of the shard library.
#ifndef SHARD_IMPL_H
#define SHARD_IMPL_H

#include <shard/shard.h>

#endif // SHARD_IMPL_H
