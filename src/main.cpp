// shardtrain: fine-tune BERT-family encoders on clusters. See README.md and docs/.
#include "shardtrain/cli/app.h"

int main(int argc, char** argv) { return shardtrain::run_cli(argc, argv); }
